"""Validation of the log layer's inputs and the roll policy."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.log import inputs
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.log_writer import RollPolicy


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 200])
def test_good_stream_names(name):
    assert inputs.check_stream_name(name) == name


@pytest.mark.parametrize("name", ["", "-x", ".hidden", "a/b", "a b", "x" * 201, "é", None, 3])
def test_bad_stream_names_are_refused_with_the_rule(name):
    with pytest.raises(InvalidArgumentError, match="stream name .* is invalid: use 1-200 letters"):
        inputs.check_stream_name(name)


@pytest.mark.parametrize("count", [0, -1, inputs.MAX_PARTITIONS + 1, True, 1.5, "2"])
def test_bad_partition_counts(count):
    with pytest.raises(InvalidArgumentError, match="partition count must be an integer from 1 to 1024"):
        inputs.check_partition_count(count)


@pytest.mark.parametrize("partition", [-1, 3, True, "0", None])
def test_bad_partitions_name_the_range(partition):
    with pytest.raises(InvalidArgumentError, match=r"stream 's' has partitions 0..2; partition .* does not exist"):
        inputs.check_partition(partition, 3, "s")


@pytest.mark.parametrize("writer_id", ["", " q", "q\n", "x" * 201, None, 7])
def test_bad_writer_ids(writer_id):
    with pytest.raises(InvalidArgumentError, match="writer id .* is invalid"):
        inputs.check_writer_id(writer_id)


@pytest.mark.parametrize("batch_id", [-1, 1.0, True, "3", 2**63])
def test_bad_batch_ids(batch_id):
    with pytest.raises(InvalidArgumentError, match="batch id must be an integer >= 0"):
        inputs.check_batch_id(batch_id)


def test_replication_is_checked_and_normalised():
    assert inputs.check_replication(3, 2, 2, "HMAC") == Replication(3, 2, 2, "hmac-sha256")
    with pytest.raises(InvalidConfigurationError, match="ensemble_size >= write_quorum >= ack_quorum"):
        inputs.check_replication(2, 3, 2, "crc32c")
    with pytest.raises(InvalidConfigurationError, match="unknown digest type"):
        inputs.check_replication(3, 3, 2, "md5")


def test_schema_forms():
    assert inputs.check_schema(None) is None and inputs.check_schema(bytearray(b"ab")) == b"ab"
    with pytest.raises(InvalidArgumentError, match="must not be empty bytes"):
        inputs.check_schema(b"")
    with pytest.raises(InvalidArgumentError, match="must be a pyarrow.Schema or the bytes"):
        inputs.check_schema("a: int")


def test_arrow_schemas_are_encoded_as_the_spark_layer_stores_them():
    pa = pytest.importorskip("pyarrow")
    from pyspark_ledger.log.stream_schema import decode_stream_schema
    stored = inputs.check_schema(pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.large_string())]))
    assert decode_stream_schema(stored) == pa.schema([("id", pa.int64()), ("s", pa.string())])


def test_ledger_id_mappings():
    assert inputs.check_ledger_ids({1: [5, 6], 0: (7,)}, 2, "s") == {0: (7,), 1: (5, 6)}
    for bad, message in (([1], "must be a mapping"), ({2: [1]}, "partition 2 does not exist"),
                         ({0: 5}, "expected a list of ledger ids"), ({0: [-1]}, "-1 is not a ledger id"),
                         ({0: [1], 1: [1]}, "ledger 1 is listed twice")):
        with pytest.raises(InvalidArgumentError, match=message):
            inputs.check_ledger_ids(bad, 2, "s")


def test_roll_policy_rolls_on_any_limit_and_never_an_empty_ledger():
    policy = RollPolicy(max_entries=3, max_bytes=100, max_age_s=5)
    assert not policy.due(2, 99, 4.9)
    assert policy.due(3, 0, 0) and policy.due(1, 100, 0) and policy.due(1, 0, 5.0)
    assert not policy.due(0, 1000, 60)
    assert not RollPolicy().due(10**9, 10**12, 10**6)


@pytest.mark.parametrize("kwargs", [{"max_entries": 0}, {"max_bytes": -1}, {"max_age_s": 0}, {"max_entries": 1.5},
                                    {"max_bytes": True}, {"max_age_s": "1"}])
def test_bad_roll_policies(kwargs):
    with pytest.raises(InvalidConfigurationError, match="RollPolicy"):
        RollPolicy(**kwargs)
