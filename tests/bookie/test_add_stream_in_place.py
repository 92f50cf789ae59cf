"""Large adds decoded in place (bookie_server/add_wire.py) through an add stream's checks into a real storage:
stored byte for byte with the entry log's checksum over them, and copied out of the received batch when only
some of its adds are admitted (so that the admitted adds hold only what they are charged)."""
from __future__ import annotations

import threading

import pytest

from bookie_server.add_stream import AddStreamSession
from bookie_server.add_wire import decode_add_batch
from bookie_server.entry_log import HEADER_SIZE as RECORD_HEADER_SIZE
from bookie_server.limits import StreamLimits
from bookie_server.metrics import BookieMetrics
from bookie_server.storage import BookieStorage
from pyspark_ledger.client.add_wire import AddEncoder, varint
from pyspark_ledger.errors import CorruptStorageError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import KEY, entry

MiB = 1024 * 1024
LEDGER = 41


class StorageSpy:
    """Records the adds a session hands to the (real) storage."""

    def __init__(self, storage: BookieStorage, monkeypatch) -> None:
        self.batches: list[list[tuple]] = []
        self.done = threading.Event()
        real = storage.add_entries_then

        def add_entries_then(ops, on_done):
            self.batches.append(list(ops))

            def done(statuses):
                on_done(statuses)
                self.done.set()
            real(ops, done)
        monkeypatch.setattr(storage, "add_entries_then", add_entries_then)


def take(storage: BookieStorage, raw: bytes) -> None:
    session = AddStreamSession(storage, BookieMetrics(), bookie_id="test", limits=StreamLimits(max_entry_size=5 * MiB))
    session._take_batch(decode_add_batch(raw))


def bodies(count: int) -> list[bytes]:
    return [entry(LEDGER, e, bytes([e + 1]) * MiB) for e in range(count)]


def test_large_bodies_go_to_storage_as_views_of_the_received_batch_and_are_stored_intact(storage, monkeypatch):
    spy = StorageSpy(storage, monkeypatch)
    encoder, stored = AddEncoder(LEDGER, KEY), bodies(3)
    raw = b"".join(encoder.encode(e, body) for e, body in enumerate(stored))
    take(storage, raw)
    assert spy.done.wait(30)
    (ops,) = spy.batches
    assert [type(op[3]) for op in ops] == [memoryview] * 3 and all(op[3].obj is raw for op in ops)
    assert [storage.read_entry(LEDGER, e) for e in range(3)] == stored


def test_when_some_adds_of_a_batch_are_refused_the_admitted_bodies_are_copied_out(storage, monkeypatch):
    spy = StorageSpy(storage, monkeypatch)
    encoder, stored = AddEncoder(LEDGER, KEY), bodies(2)
    bad = pb.AddRequest(ledger_id=LEDGER, entry_id=-1, master_key=KEY, body=b"x" * MiB).SerializeToString()
    raw = encoder.encode(0, stored[0]) + b"\x0a" + varint(len(bad)) + bad + encoder.encode(1, stored[1])
    assert decode_add_batch(raw).in_place  # the refused add is well formed on the wire, only its id is not
    take(storage, raw)
    assert spy.done.wait(30)
    (ops,) = spy.batches
    assert [(op[1], type(op[3])) for op in ops] == [(0, bytes), (1, bytes)]
    assert [storage.read_entry(LEDGER, e) for e in range(2)] == stored


def test_a_body_decoded_in_place_is_checksummed_as_stored(storage, tmp_path, monkeypatch):
    """The entry log's CRC covers the bytes written from the view: damage to them is found on read."""
    spy = StorageSpy(storage, monkeypatch)
    stored = bodies(1)[0]
    take(storage, AddEncoder(LEDGER, KEY).encode(0, stored))
    assert spy.done.wait(30)
    (log_file,) = (tmp_path / "bookie").rglob("*.log")
    with open(log_file, "r+b") as handle:
        handle.seek(RECORD_HEADER_SIZE + len(stored) // 2)
        handle.write(b"\x00" if handle.read(1) != b"\x00" else b"\x01")
    with pytest.raises(CorruptStorageError, match="checksum"):
        storage.read_entry(LEDGER, 0)
