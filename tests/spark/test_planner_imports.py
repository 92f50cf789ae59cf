"""The processes Spark starts for planning and committing import no gRPC, protobuf, asyncio or cryptography.

Spark stops its Python planner processes after a minute idle and the next job
starts them afresh, each importing what the data source's code needs
(docs/measurements.md, "The first Spark job after a minute idle"). Planning a
read, planning a write and committing one only read and write metadata, so a
fresh interpreter doing just that must not load the client's bookie side. Real
bookies (the module's sandbox) hold the stream; no Spark JVM is needed: the
steps run as Spark's planner runs them, on objects pickled by another process.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.read_helpers import PASSWORD, SCHEMA, append_rows, rows_batch, unique_stream

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]
BOOKIE_SIDE = ("grpc", "google.protobuf", "asyncio", "cryptography", "kazoo")

FRESH_PROCESS = r"""
import base64, json, sys
from pyspark import cloudpickle
source, schema, writer, message = (cloudpickle.loads(base64.b64decode(blob)) for blob in sys.argv[1:5])
import pyspark_ledger.spark.source  # what Spark's lookup imports
assert source.schema() == schema
reader = source.reader(schema)
planned = len(reader.partitions())
source.writer(schema, False)
writer.commit([message])
print(json.dumps({"planned": planned, "loaded": [name for name in json.loads(sys.argv[5]) if name in sys.modules]}))
"""


def test_planning_and_committing_in_a_fresh_process_import_no_bookie_side(cluster, request):
    from pyspark import cloudpickle

    from pyspark_ledger.spark.executor import stream_client
    from pyspark_ledger.spark.sink_task import write_task
    from pyspark_ledger.spark.source import DefaultSource

    streams = stream_client(cluster.metadata_uri, PASSWORD)
    name = unique_stream(request)
    streams.create_stream(name, 1, SCHEMA)
    append_rows(streams, name, 0, 0, 2, 10)
    options = {"metadataServiceUri": cluster.metadata_uri, "stream": name, "password": PASSWORD}
    source = DefaultSource(options)
    schema = source.schema()
    writer = DefaultSource(options).writer(schema, False)
    message = write_task(writer.plan, iter([rows_batch(0, 20, 5)]), 0)  # a finished task's ledger
    blobs = [base64.b64encode(cloudpickle.dumps(item)).decode() for item in (source, schema, writer, message)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, *blobs, json.dumps(BOOKIE_SIDE)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["planned"] >= 1
    assert seen["loaded"] == [], f"planning and committing imported {seen['loaded']}"
    assert streams.partition_logs(name)[0].spans[-1].entry_count == 1  # the commit took effect
