"""Options of format("ledger"): defaults, parsing, and a clear error for every bad one."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.log import EARLIEST, LATEST, LogPosition
from pyspark_ledger.spark.options import (KNOWN_OPTIONS, ReadOptions, WriteOptions, parse_read_options,
                                          parse_write_options)

URI = "sqlite:///tmp/ledger-test/metadata.db"
BASE = {"metadataserviceuri": URI, "stream": "orders"}
MODES = {"batch read": (parse_read_options, False), "streaming read": (parse_read_options, True),
         "batch write": (parse_write_options, False), "streaming write": (parse_write_options, True)}


def parse(mode: str, **options):
    function, streaming = MODES[mode]
    return function({**BASE, **options}, streaming=streaming)


def refused(mode: str, options: dict, *fragments: str) -> str:
    function, streaming = MODES[mode]
    with pytest.raises(InvalidConfigurationError) as caught:
        function(options, streaming=streaming)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- defaults and happy paths ------------------------------------------------------------


def test_batch_read_defaults():
    options = parse("batch read")
    assert isinstance(options, ReadOptions) and not options.streaming
    assert (options.metadata_service_uri, options.stream) == (URI, "orders")
    assert options.starting_offsets.default == EARLIEST and options.ending_offsets.default == LATEST
    assert options.fail_on_data_loss is True and options.include_metadata is False
    assert options.max_entries_per_trigger is None and options.max_bytes_per_trigger is None
    assert options.password == "" and options.password_bytes == b""


def test_streaming_read_has_no_ending_offsets_and_takes_limits():
    options = parse("streaming read", maxentriespertrigger="500", maxbytespertrigger="64m",
                    startingoffsets='{"1": "3:17"}', failondataloss="FALSE", includemetadata="true")
    assert options.streaming and options.ending_offsets is None
    assert options.max_entries_per_trigger == 500 and options.max_bytes_per_trigger == 64 * 2**20
    assert options.starting_offsets.position_for(1) == LogPosition(3, 17)
    assert options.fail_on_data_loss is False and options.include_metadata is True


def test_write_defaults():
    options = parse("batch write")
    assert isinstance(options, WriteOptions)
    assert (options.ensemble_size, options.write_quorum, options.ack_quorum) == (3, 3, 2)
    assert options.partitions is None and options.digest == "crc32c"
    assert options.rows_per_entry == 10_000


def test_write_options_parsed():
    options = parse("streaming write", partitions="4", ensemblesize="5", writequorum="3",
                    ackquorum="3", digest="HMAC-SHA256", rowsperentry="2500", password="s3cret")
    assert (options.partitions, options.ensemble_size, options.write_quorum, options.ack_quorum) == (4, 5, 3, 3)
    assert options.digest == "hmac-sha256" and options.rows_per_entry == 2500
    assert options.password_bytes == b"s3cret"


def test_names_are_case_insensitive_and_camel_case_works_from_python():
    options = parse_write_options({"MetadataServiceUri": URI, "Stream": "orders", "ensembleSize": "1",
                                   "WRITEQUORUM": 1, "ackQuorum": 1})
    assert (options.ensemble_size, options.write_quorum, options.ack_quorum) == (1, 1, 1)


def test_password_is_never_shown_in_repr():
    assert "s3cret" not in repr(parse("batch read", password="s3cret"))
    assert "s3cret" not in repr(parse("batch write", password="s3cret"))


def test_load_path_names_the_stream():
    options = parse_read_options({"metadataserviceuri": URI, "path": "clicks"})
    assert options.stream == "clicks"
    assert parse_read_options({**BASE, "path": "orders"}).stream == "orders"


def test_checkpoint_location_from_spark_is_ignored():
    assert parse("streaming write", checkpointlocation="/tmp/ck").stream == "orders"


def test_none_values_count_as_absent():
    assert parse("batch read", startingoffsets=None).starting_offsets.default == EARLIEST


@pytest.mark.parametrize("raw, expected", [("1", 1), ("1048576", 2**20), ("512k", 512 * 2**10),
                                           ("64M", 64 * 2**20), ("1g", 2**30), ("2 GiB", 2 * 2**30),
                                           ("10mb", 10 * 2**20), ("100b", 100)])
def test_byte_sizes(raw, expected):
    assert parse("streaming read", maxbytespertrigger=raw).max_bytes_per_trigger == expected


def test_max_partition_bytes_of_a_batch_read():
    assert parse("batch read").max_partition_bytes is None  # batch_reader.SPLIT_BYTES
    assert parse("batch read", maxpartitionbytes="512m").max_partition_bytes == 512 * 2**20
    assert parse("batch read", maxpartitionbytes="1m").max_partition_bytes == 2**20
    assert parse("batch read", maxpartitionbytes="64g").max_partition_bytes == 64 * 2**30


@pytest.mark.parametrize("raw, expected", [("1", 1), ("3", 3), ("2147483647", 2**31 - 1)])
def test_positive_integers(raw, expected):
    assert parse("batch write", rowsperentry=raw).rows_per_entry == expected


# --- a clear error for every bad option --------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_missing_metadata_service_uri(mode):
    refused(mode, {"stream": "orders"}, "metadataServiceUri is required", mode, "sqlite:///", "zk://")


@pytest.mark.parametrize("mode", list(MODES))
def test_missing_stream(mode):
    refused(mode, {"metadataserviceuri": URI}, "stream is required", mode, "load('orders')")


@pytest.mark.parametrize("uri", ["", "mysql://db/x", "sqlite://relative.db", "zk://", "zk://h:notaport/x"])
def test_bad_metadata_service_uri(uri):
    refused("batch read", {**BASE, "metadataserviceuri": uri}, "metadataServiceUri", repr(uri),
            "Accepted forms")


@pytest.mark.parametrize("name", ["", " orders", "a/b", "-x", "x" * 201, "ordres!", "é"])
def test_bad_stream_name(name):
    refused("batch write", {**BASE, "stream": name}, "option stream=", repr(name), "letters, digits")


def test_stream_and_path_disagree():
    refused("batch read", {**BASE, "path": "clicks"}, "option stream='orders'", "'clicks'", "different streams")


@pytest.mark.parametrize("key, value, mode, accepted", [
    ("partitions", "0", "batch write", "whole number from 1"),
    ("partitions", "two", "batch write", "whole number from 1"),
    ("ensembleSize", "-3", "batch write", "whole number from 1"),
    ("writeQuorum", "2.5", "streaming write", "whole number from 1"),
    ("ackQuorum", "", "batch write", "whole number from 1"),
    ("rowsPerEntry", "2147483648", "batch write", "whole number from 1"),
    ("rowsPerEntry", "１０", "batch write", "whole number from 1"),
    ("maxEntriesPerTrigger", "0", "streaming read", "whole number from 1"),
    ("maxBytesPerTrigger", "0", "streaming read", "positive number of bytes"),
    ("maxBytesPerTrigger", "64x", "streaming read", "positive number of bytes"),
    ("maxBytesPerTrigger", "-1m", "streaming read", "positive number of bytes"),
    ("maxPartitionBytes", "1048575", "batch read", "from 1m to 64g"),
    ("maxPartitionBytes", "65g", "batch read", "from 1m to 64g"),
    ("maxPartitionBytes", "lots", "batch read", "positive number of bytes"),
    ("failOnDataLoss", "yes", "batch read", "true or false"),
    ("includeMetadata", "1", "streaming read", "true or false"),
    ("digest", "md5", "batch write", "crc32c or hmac-sha256"),
    ("startingOffsets", "first", "batch read", "\"earliest\", \"latest\", or a JSON object"),
    ("startingOffsets", '{"0": "3-17"}', "streaming read", "malformed"),
    ("endingOffsets", "{broken", "batch read", "not a valid JSON object"),
    ("endingOffsets", "earliest", "batch read", "not allowed"),
    ("startingOffsets", "latest", "batch read", "not allowed"),
])
def test_malformed_values_name_option_value_and_accepted(key, value, mode, accepted):
    refused(mode, {**BASE, key.lower(): value}, key, accepted)
    refused(mode, {**BASE, key.lower(): value}, repr(value) if "Offsets" not in key else key)


@pytest.mark.parametrize("options, named", [
    ({"ensemblesize": "2"}, "ensembleSize=2, writeQuorum=3 (default), ackQuorum=2 (default)"),
    ({"ensemblesize": "1"}, "ensembleSize=1, writeQuorum=3 (default)"),
    ({"writequorum": "2", "ackquorum": "3"}, "writeQuorum=2, ackQuorum=3"),
    ({"ackquorum": "4"}, "ackQuorum=4"),
])
def test_quorum_rule_violations_say_which_values_were_defaults(options, named):
    refused("batch write", {**BASE, **options}, named, "ensembleSize >= writeQuorum >= ackQuorum",
            "1, 1, 1 for a single bookie")


@pytest.mark.parametrize("given, suggestion", [
    ("startingoffset", "did you mean startingOffsets?"),
    ("maxentriesperbatch", "did you mean maxEntriesPerTrigger?"),
    ("metadataserviceurl", "did you mean metadataServiceUri?"),
    ("ensemble", "did you mean ensembleSize?"),
    ("writequorom", "did you mean writeQuorum?"),
    ("pasword", "did you mean password?"),
])
def test_unknown_options_suggest_the_closest_name(given, suggestion):
    message = refused("batch write" if "quor" in given or "ensemble" in given else "streaming read",
                      {**BASE, given: "hunter2"}, f"unknown option {given}", suggestion)
    assert "hunter2" not in message  # a misspelt password is never echoed


def test_unknown_option_without_a_close_name_lists_the_known_ones():
    message = refused("batch read", {**BASE, "kafka.bootstrap.servers": "x"},
                      "unknown option kafka.bootstrap.servers", "known options are")
    assert "did you mean" not in message
    assert all(name in message for name in KNOWN_OPTIONS)


def test_an_option_given_twice_in_different_case_is_refused():
    refused("batch read", {**BASE, "Stream": "clicks"}, "'Stream' is given twice")


@pytest.mark.parametrize("key, value, mode, why", [
    ("endingOffsets", "latest", "streaming read", "availableNow"),
    ("maxEntriesPerTrigger", "10", "batch read", "endingOffsets"),
    ("maxBytesPerTrigger", "1m", "batch read", "endingOffsets"),
    ("maxPartitionBytes", "512m", "streaming read", "maxBytesPerTrigger"),
    ("startingOffsets", "earliest", "batch write", "appends at the end"),
    ("endingOffsets", "latest", "streaming write", "only to a batch read"),
    ("failOnDataLoss", "false", "batch write", "only to a batch read and streaming read"),
    ("includeMetadata", "true", "streaming write", "only to a batch read and streaming read"),
    ("partitions", "2", "batch read", "partitions the stream has"),
    ("ensembleSize", "3", "streaming read", "replication is chosen"),
    ("writeQuorum", "3", "batch read", "replication is chosen"),
    ("ackQuorum", "2", "batch read", "replication is chosen"),
    ("digest", "crc32c", "streaming read", "digest each ledger was written with"),
    ("rowsPerEntry", "10", "batch read", "entries as written"),
    ("minAckQuorumZones", "2", "streaming read", "bookies are placed when a stream is written"),
])
def test_options_of_another_mode_are_refused_with_the_reason(key, value, mode, why):
    refused(mode, {**BASE, key.lower(): value}, f"option {key} does not apply to a {mode}", why,
            "remove it")
