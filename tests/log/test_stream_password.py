"""A stream knows its password: the log layer refuses another one before it creates or opens any ledger.

Real bookies and SQLite metadata. A stream is created with password A (the
fixture's client); a client on the same store and bookies with password B is
refused by every path that reads or writes the stream, naming the parameter,
and nothing is created. Records of the old format (no check) take their first
ledger's password, or the first writer's if they have no ledger.
"""
from __future__ import annotations

import json

import pytest

from pyspark_ledger.entry import password_check
from pyspark_ledger.errors import MetadataError, UnauthorizedError
from pyspark_ledger.log.log_metadata import decode, encode, stream_key
from pyspark_ledger.log.stream_client import StreamClient
from pyspark_ledger.log.stream_password import matches, stream_password_check
from pyspark_ledger.log.stream_store import read_stream
from tests.log.conftest import PASSWORD

OTHER = b"not-the-stream-password"


def client_with(streams: StreamClient, password: bytes) -> StreamClient:
    """A StreamClient on the same store and replication client, with another password."""
    return StreamClient(streams.context.store, password=password, client=streams.client)


def refused_message(stream: str, empty: bool = False) -> str:
    given = "is not set \\(empty\\), which does not match" if empty else "does not match"
    return f"StreamClient's parameter password {given} the password of stream '{stream}'"


def make_old_format(streams: StreamClient, stream: str) -> None:
    """Rewrite the stream's record as the code before stream checks wrote it: no password_check field."""
    store = streams.context.store
    stored = store.get(stream_key(stream))
    doc = json.loads(stored.value)
    doc.pop("password_check")
    store.set(stream_key(stream), json.dumps(doc, separators=(",", ":")).encode(), stored.version)
    assert read_stream(store, stream).value.password_check is None


def written(streams: StreamClient, stream: str, partition: int, count: int) -> list[bytes]:
    data = [f"{stream}-{partition}-{i}".encode() for i in range(count)]
    with streams.open_writer(stream, partition) as writer:
        for item in data:
            writer.append(item)
    return data


def read_all(streams: StreamClient, stream: str, partition: int) -> list[bytes]:
    return [entry.data for entry in streams.open_reader(stream, partition).entries()]


def test_the_record_keeps_a_check_not_the_password(streams, stream_name):
    streams.create_stream(stream_name, 1)
    raw = streams.context.store.get(stream_key(stream_name)).value
    assert PASSWORD not in raw
    check = decode(raw, stream_name).password_check
    assert check.startswith("sha256$") and matches(PASSWORD, check, stream_name)
    assert not matches(OTHER, check, stream_name)
    # a ledger's password_check is made under another label: copied into a stream record, it never passes
    assert not matches(PASSWORD, password_check(PASSWORD), stream_name)
    with pytest.raises(MetadataError, match=f"password check in the record of stream '{stream_name}' is malformed"):
        matches(PASSWORD, "not-a-check", stream_name)


def test_every_path_with_another_password_fails_naming_the_parameter_and_creates_nothing(streams, stream_name):
    pa = pytest.importorskip("pyarrow")
    streams.create_stream(stream_name, 2)
    data = written(streams, stream_name, 0, 5)
    first = streams.create_ledger(stream_name, 1)
    first.append(b"committed")
    first.close()
    streams.commit_ledgers(stream_name, "w", 0, {1: [first.ledger_id]})
    held = read_stream(streams.context.store, stream_name).value
    ledgers = set(streams.client.list_ledgers())
    spare = streams.create_ledger(stream_name, 1)  # written with the right password, to commit with the wrong one
    spare.close()
    ledgers.add(spare.ledger_id)
    wrong = client_with(streams, OTHER)
    attempts = {
        "open_writer": lambda: wrong.open_writer(stream_name, 0),
        "open_reader": lambda: wrong.open_reader(stream_name, 0),
        "partition_logs": lambda: wrong.partition_logs(stream_name),
        "create_ledger": lambda: wrong.create_ledger(stream_name, 1),
        "commit_ledgers": lambda: wrong.commit_ledgers(stream_name, "w", 1, {1: [spare.ledger_id]}),
        "set_schema": lambda: wrong.set_schema(stream_name, pa.schema([("x", pa.int32())])),
        "add_partitions": lambda: wrong.add_partitions(stream_name, 3),
        "verify_password": lambda: wrong.verify_password(stream_name, write=True),
    }
    for what, attempt in attempts.items():
        with pytest.raises(UnauthorizedError, match=refused_message(stream_name)):
            attempt()
        assert set(streams.client.list_ledgers()) == ledgers, f"{what} created a ledger"
        assert read_stream(streams.context.store, stream_name).value == held, f"{what} changed the record"
    with pytest.raises(UnauthorizedError, match=refused_message(stream_name, empty=True)):
        client_with(streams, b"").open_writer(stream_name, 0)
    assert read_all(streams, stream_name, 0) == data, "the stream no longer reads whole with its password"
    assert read_all(streams, stream_name, 1) == [b"committed"]
    assert streams.verify_password(stream_name).name == stream_name
    assert wrong.open_stream(stream_name).partitions == 2, "describing a stream needs no password"


def test_an_old_record_with_ledgers_takes_the_password_of_its_first_ledger(streams, stream_name):
    streams.create_stream(stream_name, 2)
    data = written(streams, stream_name, 1, 3)
    make_old_format(streams, stream_name)
    wrong = client_with(streams, OTHER)
    ledgers = set(streams.client.list_ledgers())
    for attempt in (lambda: wrong.open_writer(stream_name, 0), lambda: wrong.open_reader(stream_name, 1)):
        with pytest.raises(UnauthorizedError, match=refused_message(stream_name)):
            attempt()
    assert set(streams.client.list_ledgers()) == ledgers
    assert read_stream(streams.context.store, stream_name).value.password_check is None, "a refusal records nothing"
    assert read_all(streams, stream_name, 1) == data  # a reader with the right password records the check
    check = read_stream(streams.context.store, stream_name).value.password_check
    assert check is not None and matches(PASSWORD, check, stream_name)
    with pytest.raises(UnauthorizedError, match=refused_message(stream_name)):
        wrong.partition_logs(stream_name)


def test_an_old_record_without_ledgers_takes_the_first_writers_password(streams, stream_name):
    streams.create_stream(stream_name, 1)
    make_old_format(streams, stream_name)
    reader = client_with(streams, b"just-looking")
    assert reader.partition_logs(stream_name)[0].spans == ()  # nothing to read: passes, claims nothing
    assert read_stream(streams.context.store, stream_name).value.password_check is None
    first_writer = client_with(streams, OTHER)
    data = written(first_writer, stream_name, 0, 2)
    check = read_stream(streams.context.store, stream_name).value.password_check
    assert matches(OTHER, check, stream_name)
    with pytest.raises(UnauthorizedError, match=refused_message(stream_name)):
        streams.open_writer(stream_name, 0)
    assert read_all(first_writer, stream_name, 0) == data


def test_old_and_new_records_decode(streams, stream_name):
    streams.create_stream(stream_name, 1)
    record = read_stream(streams.context.store, stream_name).value
    doc = json.loads(encode(record))
    assert doc["password_check"] == record.password_check
    del doc["password_check"]
    old = decode(json.dumps(doc).encode(), stream_name)
    assert old.password_check is None and old.name == stream_name
    assert "password_check" not in json.loads(encode(old)), "an old record stays in the old form until checked"
    doc["password_check"] = 7
    with pytest.raises(MetadataError, match="password_check must be a string"):
        decode(json.dumps(doc).encode(), stream_name)
    salt = bytes.fromhex(record.password_check.split("$")[1])
    assert record.password_check == stream_password_check(PASSWORD, salt)
