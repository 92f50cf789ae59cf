"""The stream registry against real bookies and SQLite metadata: create, open, list, delete, schema, partitions."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import (InvalidArgumentError, InvalidConfigurationError, LedgerFencedError,
                                   MetadataExistsError, NoSuchKeyError, NoSuchLedgerError)
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.log_transitions import mark_deleting
from pyspark_ledger.log.stream_store import read_stream, update_stream
from tests.log.conftest import PASSWORD, payload


def test_create_open_list_and_delete(streams, stream_name):
    info = streams.create_stream(stream_name, 3, ensemble_size=3, write_quorum=2, ack_quorum=2)
    assert (info.name, info.partitions, info.replication, info.schema) == (stream_name, 3, Replication(3, 2, 2), None)
    opened = streams.open_stream(stream_name)
    assert opened == info and len(opened.uid) == 32
    other = stream_name + "-b"
    streams.create_stream(other, 1)
    assert {stream_name, other} <= set(streams.list_streams())
    streams.delete_stream(other)
    assert other not in streams.list_streams()
    with pytest.raises(NoSuchKeyError, match=f"stream '{other}' does not exist"):
        streams.open_stream(other)


def test_schema_is_stored_and_returned(streams, stream_name):
    pa = pytest.importorskip("pyarrow")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.large_string())])
    info = streams.create_stream(stream_name, 2, schema)
    assert streams.open_stream(stream_name).arrow_schema() == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert streams.set_schema(stream_name, info.schema) == info  # the same schema again: nothing changes
    with pytest.raises(InvalidArgumentError, match="already has a different schema"):
        streams.set_schema(stream_name, pa.schema([("other", pa.int32())]))
    changed = streams.set_schema(stream_name, pa.schema([("other", pa.int32())]), replace=True)
    assert changed.arrow_schema().names == ["other"]


def test_a_stream_created_without_schema_gets_one_later(streams, stream_name):
    streams.create_stream(stream_name, 1)
    assert streams.open_stream(stream_name).arrow_schema() is None
    assert streams.set_schema(stream_name, b"\x01schema-bytes").schema == b"\x01schema-bytes"


def test_partitions_can_be_added_not_removed(streams, stream_name):
    streams.create_stream(stream_name, 2)
    assert streams.add_partitions(stream_name, 5).partitions == 5
    assert streams.add_partitions(stream_name, 5).partitions == 5
    with pytest.raises(InvalidArgumentError, match="can be added, not removed"):
        streams.add_partitions(stream_name, 1)
    with streams.open_writer(stream_name, 4) as writer:
        assert writer.append(b"x").ledger_seq == 0


def test_bad_inputs_get_clear_errors(streams, stream_name):
    streams.create_stream(stream_name, 2)
    cases = [
        (lambda: streams.create_stream("bad/name", 1), InvalidArgumentError, "stream name 'bad/name' is invalid"),
        (lambda: streams.create_stream(stream_name + "x", 0), InvalidArgumentError, "partition count"),
        (lambda: streams.create_stream(stream_name + "x", 1, ensemble_size=2, write_quorum=3),
         InvalidConfigurationError, "ensemble_size >= write_quorum"),
        (lambda: streams.create_stream(stream_name + "x", 1, schema="id int"), InvalidArgumentError,
         "pyarrow.Schema or the bytes"),
        (lambda: streams.create_stream(stream_name, 2), MetadataExistsError, f"stream '{stream_name}' already exists"),
        (lambda: streams.open_writer(stream_name, 2), InvalidArgumentError, "partitions 0..1; partition 2"),
        (lambda: streams.open_reader(stream_name, -1), InvalidArgumentError, "partition -1 does not exist"),
        (lambda: streams.open_reader(stream_name, 0, "3-17"), InvalidArgumentError, "start position '3-17'"),
        (lambda: streams.open_writer("missing-stream", 0), NoSuchKeyError, "stream 'missing-stream' does not exist"),
        (lambda: streams.delete_stream("missing-stream"), NoSuchKeyError, "does not exist"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert streams.list_streams().count(stream_name) == 1


def test_delete_fences_the_writer_and_deletes_every_ledger(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 2)
    writer = streams.open_writer(stream_name, 0)
    writer.append(payload(0))
    ledger = streams.create_ledger(stream_name, 1)
    ledger.append(payload(1))
    ledger.close()
    streams.commit_ledgers(stream_name, "job", 0, {1: [ledger.ledger_id]})
    other = make_streams()
    other.delete_stream(stream_name)
    for ledger_id in (writer.ledger_id, ledger.ledger_id):
        with pytest.raises(NoSuchLedgerError):
            streams.client.ledger_metadata(ledger_id)
    with pytest.raises(LedgerFencedError):  # the deleter fenced it before deleting it
        writer.append(payload(2))
    with pytest.raises(NoSuchLedgerError):
        writer.close()
    assert stream_name not in streams.list_streams()
    streams.create_stream(stream_name, 1)  # the name is free again, as a new incarnation
    assert streams.open_stream(stream_name).partitions == 1


def test_an_interrupted_delete_is_finished_by_deleting_again(streams, stream_name):
    streams.create_stream(stream_name, 1)
    ledger = streams.create_ledger(stream_name, 0)
    ledger.append(b"x")
    ledger.close()
    streams.commit_ledgers(stream_name, "job", 0, {0: [ledger.ledger_id]})
    store = streams.context.store  # the first step of a delete that then crashed
    update_stream(store, stream_name, mark_deleting)
    assert stream_name not in streams.list_streams()
    with pytest.raises(MetadataExistsError, match="still being deleted: call delete_stream"):
        streams.create_stream(stream_name, 1)
    with pytest.raises(NoSuchKeyError, match="is being deleted"):
        streams.open_stream(stream_name)
    assert streams.client.ledger_metadata(ledger.ledger_id).is_closed  # not deleted yet
    streams.delete_stream(stream_name)
    with pytest.raises(NoSuchLedgerError):
        streams.client.ledger_metadata(ledger.ledger_id)
    with pytest.raises(NoSuchKeyError):
        read_stream(store, stream_name)


def test_stream_ledgers_are_tagged_and_use_the_stream_replication(streams, stream_name):
    streams.create_stream(stream_name, 2, ensemble_size=3, write_quorum=2, ack_quorum=1, digest="hmac-sha256")
    ledger = streams.create_ledger(stream_name, 1)
    md = ledger.metadata
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum, md.digest_type) == (3, 2, 1, "hmac-sha256")
    assert md.custom_metadata == {"stream": stream_name.encode(), "partition": b"1"}
    ledger.close()
    streams.client.open_ledger(ledger.ledger_id, PASSWORD)  # the stream's password protects it
