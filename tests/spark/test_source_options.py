"""Every bad read option fails on the driver, before any task runs, with a message naming the option.

Driver-side failures reach the user as AnalysisException [PYTHON_DATA_SOURCE_ERROR]
(batch) or a StreamingQueryException wrapping the Python data source error
(streaming), never as a failed task.
"""
from __future__ import annotations

import re

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import PASSWORD, SCHEMA, append_rows, start_sandbox  # noqa: E402

pytestmark = pytest.mark.spark
STREAM = "options-test"
DRIVER_ERRORS = ("PYTHON_DATA_SOURCE_ERROR", "PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR")


@pytest.fixture(scope="module")
def cluster():
    sandbox = start_sandbox()
    try:
        streams = executor.stream_client(sandbox.metadata_uri, PASSWORD)
        streams.create_stream(STREAM, 2, SCHEMA)
        append_rows(streams, STREAM, 0, 0, 2, 5)
        yield sandbox
    finally:
        executor.close_all(sandbox.metadata_uri)
        sandbox.stop()


def options_for(cluster, drop=(), **options) -> dict[str, str]:
    base = {"metadataServiceUri": cluster.metadata_uri, "stream": STREAM, "password": PASSWORD}
    return {key: str(value) for key, value in {**base, **options}.items() if key not in drop}


def driver_failure(action) -> str:
    with pytest.raises(Exception) as caught:
        action()
    text = str(caught.value)
    assert any(marker in text for marker in DRIVER_ERRORS), f"not a driver-side data source error: {text[:500]}"
    assert "Task" not in text.split("Traceback")[0], "the failure must not come from a task"
    return text


BATCH_CASES = [
    ({"drop": ("metadataServiceUri",)}, "option metadataServiceUri is required for a batch read"),
    ({"drop": ("stream",)}, "option stream is required for a batch read"),
    ({"metadataServiceUri": "http://127.0.0.1:1/x"}, "option metadataServiceUri='http://127.0.0.1:1/x' is invalid"),
    ({"stream": "no spaces allowed"}, "option stream='no spaces allowed' is invalid"),
    ({"startingOffset": "earliest"}, "unknown option startingoffset for format 'ledger': did you mean startingOffsets?"),
    ({"colour": "blue"}, "unknown option colour for format 'ledger'"),
    ({"startingOffsets": "first"}, "option startingOffsets='first' is malformed"),
    ({"startingOffsets": "latest"}, "option startingOffsets=latest is not allowed"),
    ({"startingOffsets": '{"0": "1:x"}'}, "option startingOffsets, partition 0"),
    ({"startingOffsets": '{"9": "earliest"}'}, "option startingOffsets names partition(s) [9], but the stream has 2"),
    ({"endingOffsets": "earliest"}, "option endingOffsets=earliest is not allowed"),
    ({"endingOffsets": "{not json"}, "option endingOffsets '{not json' is not a valid JSON object"),
    ({"failOnDataLoss": "maybe"}, "option failOnDataLoss='maybe' is invalid: expected true or false"),
    ({"includeMetadata": "yes"}, "option includeMetadata='yes' is invalid: expected true or false"),
    ({"maxEntriesPerTrigger": "5"}, "option maxEntriesPerTrigger does not apply to a batch read"),
    ({"maxBytesPerTrigger": "1m"}, "option maxBytesPerTrigger does not apply to a batch read"),
    ({"partitions": "3"}, "option partitions does not apply to a batch read"),
    ({"rowsPerEntry": "10"}, "option rowsPerEntry does not apply to a batch read"),
    ({"ensembleSize": "3"}, "option ensembleSize does not apply to a batch read"),
    ({"password": "not-it"}, "option password does not match"),
    ({"password": ""}, "option password is not set (empty)"),
    ({"stream": "missing-stream"}, "stream 'missing-stream' does not exist"),
]


@pytest.mark.parametrize("options, message", BATCH_CASES, ids=[re.sub(r"\W+", "-", m)[:40] for _, m in BATCH_CASES])
def test_a_bad_batch_read_option_fails_on_the_driver_naming_it(spark, cluster, options, message):
    frame_options = options_for(cluster, **options)
    text = driver_failure(lambda: spark.read.format("ledger").options(**frame_options).load().collect())
    assert message in text


STREAM_CASES = [
    ({"endingOffsets": "latest"}, "option endingOffsets does not apply to a streaming read"),
    ({"maxEntriesPerTrigger": "ten"}, "option maxEntriesPerTrigger='ten' is invalid"),
    ({"maxBytesPerTrigger": "lots"}, "option maxBytesPerTrigger='lots' is invalid"),
    ({"startingOffsets": '{"0": "7:0"}'}, "the log ends at 0:2, before the position 7:0"),
    ({"password": "not-it"}, "option password does not match"),
]


@pytest.mark.parametrize("options, message", STREAM_CASES, ids=[re.sub(r"\W+", "-", m)[:40] for _, m in STREAM_CASES])
def test_a_bad_streaming_read_option_fails_on_the_driver_naming_it(spark, cluster, tmp_path, options, message):
    frame_options = options_for(cluster, **options)

    def run():
        query = (spark.readStream.format("ledger").options(**frame_options).load().writeStream.format("noop")
                 .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            assert query.awaitTermination(120), "the query neither failed nor finished"
        finally:
            query.stop()

    assert message in driver_failure(run)
