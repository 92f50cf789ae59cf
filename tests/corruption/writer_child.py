"""A writer process for the corruption suite, driven by the test on stdin; the test kills it with kill -9.

``python -m tests.corruption.writer_child METADATA_URI`` creates a ledger (E=Qw=3, Qa=2) and prints
``ledger <id>``. Each stdin line ``write <n>`` appends the next n entries (``payloads.payload``), prints
``confirmed <entry id>`` per acknowledged add and ``written`` once all n are acknowledged.
"""
from __future__ import annotations

import sys

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from tests.corruption.payloads import PASSWORD, payload


def main(uri: str) -> None:
    # a long add timeout: a stopped bookie must not start an ensemble change (there is no spare bookie)
    client = LedgerClient(uri, ClientConfig(add_timeout_s=300.0))
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    print(f"ledger {writer.ledger_id}", flush=True)
    index = 0
    for line in sys.stdin:
        count = int(line.split()[1])
        futures = [writer.append_async(payload(writer.ledger_id, index + n)) for n in range(count)]
        index += count
        for future in futures:
            print(f"confirmed {future.result(timeout=120)}", flush=True)
        print("written", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
