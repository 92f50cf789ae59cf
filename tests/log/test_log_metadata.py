"""The stream record's JSON form: round trips, compactness, the size limit, unreadable records."""
from __future__ import annotations

import json

import pytest

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.log.log_metadata import (DELETING, MAX_RECORD_BYTES, LedgerRef, PartitionRecord, Replication,
                                             StreamRecord, decode, encode, stream_key)
from pyspark_ledger.log.positions import LogPosition


def sample() -> StreamRecord:
    return StreamRecord(
        name="orders", uid="abc", ctime_ms=1_700_000_000_000, replication=Replication(4, 3, 2, "hmac-sha256"),
        partitions=(PartitionRecord(3, (LedgerRef(17, 0), LedgerRef(23, 1_700_000_000_500)), LogPosition(2, 120)),
                    PartitionRecord()),
        schema=b"\x00\xffschema", writers=(("query-1", 41), ("job-2", 0)), garbage=(5, 9))


def test_round_trip_keeps_every_field():
    record = sample()
    assert decode(encode(record), "orders") == record
    deleting = StreamRecord("x", "u", 1, Replication(), (PartitionRecord(),), state=DELETING)
    assert decode(encode(deleting), "x") == deleting


def test_encoding_is_compact_json_with_documented_keys():
    data = encode(sample())
    assert b" " not in data
    doc = json.loads(data)
    assert doc["format"] == 1 and doc["partitions"][0] == {"first": 3, "ledgers": [[17, 0], [23, 1_700_000_000_500]],
                                                           "truncated_end": [2, 120]}
    assert doc["writers"] == [["query-1", 41], ["job-2", 0]] and doc["garbage"] == [5, 9]


def test_sequence_numbers_follow_first_seq():
    part = sample().partition(0)
    assert part.next_seq == 5 and part.with_seqs() == [(3, LedgerRef(17, 0)), (4, LedgerRef(23, 1_700_000_000_500))]
    assert part.seq_of(23) == 4 and part.seq_of(99) is None
    assert part.ledger_at(3).ledger_id == 17 and part.ledger_at(2) is None and part.ledger_at(5) is None


def test_a_record_over_the_store_limit_is_refused_with_a_clear_error():
    refs = tuple(LedgerRef(2**62 + index, 1_700_000_000_000) for index in range(30_000))
    record = StreamRecord("big", "u", 1, Replication(), (PartitionRecord(0, refs),))
    with pytest.raises(MetadataError, match=r"stream 'big' would need a record of \d+ bytes for its 30000 ledgers.*"
                                            r"retention"):
        encode(record)
    fits = StreamRecord("big", "u", 1, Replication(), (PartitionRecord(0, refs[:27_000]),))
    assert len(encode(fits)) <= MAX_RECORD_BYTES  # the documented worst-case capacity


@pytest.mark.parametrize("data", [b"not json", b"{}", json.dumps({"format": 2}).encode(),
                                  encode(sample()).replace(b'"ACTIVE"', b'"GONE"'),
                                  encode(sample()).replace(b'"first":3', b'"first":"x"')])
def test_unreadable_records_raise_metadata_error_naming_the_stream(data):
    with pytest.raises(MetadataError, match="record of stream 'orders' is unreadable"):
        decode(data, "orders")


def test_stream_key():
    assert stream_key("orders") == "streams/orders"
