"""A writer process for the recovery test: appends forever, printing each confirmed entry id.

``python -m tests.integration.writer_child METADATA_URI`` prints ``ledger <id>``, then
``confirmed <entry id>`` per confirmed add (flushed), with many adds in flight,
until it is killed.
"""
from __future__ import annotations

import sys
import threading

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from tests.integration.conftest import PASSWORD, payload


def main(uri: str) -> None:
    client = LedgerClient(uri, ClientConfig(max_inflight_adds=200))
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    print(f"ledger {writer.ledger_id}", flush=True)
    lock = threading.Lock()

    def report(future) -> None:
        if future.exception() is None:
            with lock:
                sys.stdout.write(f"confirmed {future.result()}\n")
                sys.stdout.flush()
    index = 0
    while True:
        writer.append_async(payload(index)).add_done_callback(report)
        index += 1


if __name__ == "__main__":
    main(sys.argv[1])
