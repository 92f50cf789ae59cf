"""The write side's options and the streaming writer id: every bad write option fails naming it.

Pure: no Spark session, no bookies. The writers are built through
``sink.batch_writer`` / ``sink.stream_writer`` exactly as ``DefaultSource``
calls them; options are refused before any connection is made.
"""
from __future__ import annotations

import json

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.spark.options import parse_write_options
from pyspark_ledger.spark.sink import batch_writer, stream_writer
from pyspark_ledger.spark.sink_identity import (CHECKPOINT_PREFIX, QUERY_PREFIX, local_path,
                                                streaming_writer_id)

URI = "sqlite:///tmp/ledger-write-options/metadata.db"
BASE = {"metadataServiceUri": URI, "stream": "orders"}
SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}}]})


def spark_schema():
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(SCHEMA_JSON))


def write_refused(options: dict, *fragments: str, streaming: bool = False, overwrite: bool = False) -> str:
    make = stream_writer if streaming else batch_writer
    with pytest.raises(InvalidConfigurationError) as caught:
        make(options, spark_schema(), overwrite)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- every bad write option, through the writers DefaultSource builds ------------------------


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("options, fragments", [
    ({"stream": "orders"}, ("option metadataServiceUri is required",)),
    ({"metadataServiceUri": URI}, ("option stream is required",)),
    ({**BASE, "metadataServiceUri": "mysql://x"}, ("metadataServiceUri='mysql://x' is invalid",)),
    ({**BASE, "stream": "bad name!"}, ("stream='bad name!' is invalid",)),
    ({**BASE, "partitions": "0"}, ("partitions='0' is invalid", "whole number")),
    ({**BASE, "partitions": "many"}, ("partitions='many' is invalid",)),
    ({**BASE, "partitions": "1025"}, ("partitions='1025' is invalid", "from 1 to 1024")),
    ({**BASE, "ensembleSize": "-3"}, ("ensembleSize='-3' is invalid",)),
    ({**BASE, "writeQuorum": "2.5"}, ("writeQuorum='2.5' is invalid",)),
    ({**BASE, "ackQuorum": ""}, ("ackQuorum='' is invalid",)),
    ({**BASE, "ensembleSize": "1"}, ("ensembleSize=1", "writeQuorum=3 (default)", "ensembleSize >= writeQuorum")),
    ({**BASE, "ensembleSize": "3", "writeQuorum": "2", "ackQuorum": "3"}, ("ackQuorum=3",)),
    ({**BASE, "digest": "md5"}, ("digest='md5' is invalid", "crc32c or hmac-sha256")),
    ({**BASE, "rowsPerEntry": "0"}, ("rowsPerEntry='0' is invalid",)),
    ({**BASE, "rowsPerEntry": "1e4"}, ("rowsPerEntry='1e4' is invalid",)),
    ({**BASE, "rowsPerEntri": "10"}, ("unknown option rowsperentri", "did you mean rowsPerEntry?")),
    ({**BASE, "minAckQuorumZones": "0"}, ("minAckQuorumZones='0' is invalid", "from 1 (no demand) to 16")),
    ({**BASE, "minAckQuorumZones": "17"}, ("minAckQuorumZones='17' is invalid", "from 1 (no demand) to 16")),
    ({**BASE, "minAckQuorumZones": "two"}, ("minAckQuorumZones='two' is invalid", "at most ackQuorum")),
    ({**BASE, "startingOffsets": "earliest"}, ("option startingOffsets does not apply to a",
                                               "always appends at the end")),
    ({**BASE, "maxEntriesPerTrigger": "5"}, ("option maxEntriesPerTrigger does not apply",)),
    ({**BASE, "failOnDataLoss": "false"}, ("option failOnDataLoss does not apply",)),
    ({**BASE, "includeMetadata": "true"}, ("option includeMetadata does not apply",)),
    ({**BASE, "stream": "a", "path": "b"}, ("name different streams",)),
])
def test_bad_write_option_is_refused_naming_it(options, fragments, streaming):
    if streaming:
        options = {**options, "checkpointLocation": "/tmp/ledger-write-options/ck"}
    write_refused(options, *fragments, streaming=streaming)


def test_option_names_ignore_case_as_spark_lower_cases_them():
    parsed = parse_write_options({"METADATASERVICEURI": URI, "Stream": "orders", "rowsperentry": "7"})
    assert (parsed.stream, parsed.rows_per_entry) == ("orders", 7)


@pytest.mark.parametrize("streaming", [False, True])
def test_min_ack_quorum_zones_defaults_to_no_demand_and_is_parsed(streaming):
    extra = {"checkpointLocation": "/tmp/ledger-write-options/ck"} if streaming else {}
    assert parse_write_options({**BASE, **extra}, streaming=streaming).min_ack_quorum_zones == 1
    given = parse_write_options({**BASE, **extra, "minackquorumzones": " 2 "}, streaming=streaming)
    assert given.min_ack_quorum_zones == 2


def test_writer_id_is_for_streaming_writes_only():
    write_refused({**BASE, "writerId": "etl"}, "option writerId does not apply to a batch write",
                  "committed once, under an id of its own")


@pytest.mark.parametrize("raw", ["", " padded ", "tab\there", "x" * 201])
def test_bad_writer_id_is_refused(raw):
    write_refused({**BASE, "writerId": raw}, "option writerId=", "printable characters", streaming=True)


def test_streaming_write_needs_a_checkpoint_or_a_writer_id():
    write_refused(BASE, "option checkpointLocation is required for a streaming write", "writerId",
                  streaming=True)


def test_complete_output_mode_is_refused():
    write_refused({**BASE, "checkpointLocation": "/tmp/x"}, "only appends", "outputMode('append')",
                  streaming=True, overwrite=True)


def test_query_name_and_checkpoint_location_from_spark_are_accepted():
    parsed = parse_write_options({**BASE, "queryname": "q", "checkpointlocation": " /tmp/ck "}, streaming=True)
    assert parsed.checkpoint_location == "/tmp/ck" and parsed.writer_id is None
    assert parse_write_options({**BASE, "checkpointlocation": "/tmp/ck"}).checkpoint_location is None


# --- the streaming writer id -------------------------------------------------------------------


def stream_options(**extra):
    return parse_write_options({**BASE, **extra}, streaming=True)


def spark_checkpoint(directory, query_id: str = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return directory


def test_writer_id_option_wins(tmp_path):
    checkpoint = spark_checkpoint(tmp_path / "ck")
    assert streaming_writer_id(stream_options(writerid="etl-1", checkpointlocation=str(checkpoint))) == "etl-1"


def test_local_checkpoint_gives_the_query_id(tmp_path):
    checkpoint = spark_checkpoint(tmp_path / "ck", "11111111-2222-3333-4444-555555555555")
    expected = QUERY_PREFIX + "11111111-2222-3333-4444-555555555555"
    assert streaming_writer_id(stream_options(checkpointlocation=str(checkpoint))) == expected
    assert streaming_writer_id(stream_options(checkpointlocation=f"file://{checkpoint}")) == expected
    assert streaming_writer_id(stream_options(checkpointlocation=f"file:{checkpoint}/")) == expected


def test_a_new_checkpoint_at_the_same_path_is_a_new_writer(tmp_path):
    checkpoint = spark_checkpoint(tmp_path / "ck", "aaaaaaaa-0000-0000-0000-000000000001")
    first = streaming_writer_id(stream_options(checkpointlocation=str(checkpoint)))
    spark_checkpoint(checkpoint, "aaaaaaaa-0000-0000-0000-000000000002")
    assert streaming_writer_id(stream_options(checkpointlocation=str(checkpoint))) != first


def test_missing_checkpoint_metadata_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="cannot read the query id .*checkpointLocation"):
        streaming_writer_id(stream_options(checkpointlocation=str(tmp_path / "none")))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "metadata").write_text('{"id": "../../etc"}')
    with pytest.raises(InvalidConfigurationError, match="holds no Spark query id"):
        streaming_writer_id(stream_options(checkpointlocation=str(tmp_path / "odd")))


def test_remote_checkpoint_is_hashed_stably_and_distinctly():
    first = streaming_writer_id(stream_options(checkpointlocation="s3a://bucket/ck/q1"))
    assert first.startswith(CHECKPOINT_PREFIX) and len(first) <= 200
    assert streaming_writer_id(stream_options(checkpointlocation="s3a://bucket/ck/q1/")) == first
    assert streaming_writer_id(stream_options(checkpointlocation="s3a://bucket/ck/q2")) != first


@pytest.mark.parametrize("location, expected", [
    ("/tmp/ck", "/tmp/ck"), ("relative/ck", "relative/ck"), ("file:///tmp/a%20b", "/tmp/a b"),
    ("file://localhost/tmp/ck", "/tmp/ck"), ("file://otherhost/tmp/ck", None),
    ("hdfs://nn:8020/ck", None), ("s3a://bucket/ck", None)])
def test_local_path_of_checkpoint_locations(location, expected):
    assert local_path(location) == expected
