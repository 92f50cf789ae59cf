"""A Spark sink write task in a process of its own, to be killed with SIGKILL mid-write.

``python -m tests.log.orphan_task_child METADATA_URI STREAM`` runs the sink's real
``write_task`` on batches of 10 rows (one entry each); after the 5th batch it prints
``blocked`` (flushed) and waits, inside the task, until it is killed: its ledger is
left OPEN and referenced by no log -- the orphan a killed executor leaves behind.
"""
from __future__ import annotations

import sys
import threading

import pyarrow as pa

from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.spark.sink_plan import SinkPlan
from pyspark_ledger.spark.sink_task import write_task
from tests.log.conftest import PASSWORD

SCHEMA = pa.schema([pa.field("id", pa.int64())])
BATCHES = 5


def batches():
    for index in range(BATCHES):
        yield pa.record_batch([pa.array(range(index * 10, index * 10 + 10), pa.int64())], schema=SCHEMA)
    print("blocked", flush=True)
    threading.Event().wait()  # the task hangs here until the process is killed


def main(uri: str, stream: str) -> None:
    plan = SinkPlan(uri=uri, stream=stream, schema=SCHEMA, replication=Replication(3, 3, 2), partition_count=1,
                    exists=True, rows_per_entry=10, password=PASSWORD)
    write_task(plan, batches(), 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
