"""A writer's large add (payload of ``SPLIT_PAYLOAD_BYTES`` or more) is kept as two parts, never copied into one
``bytes`` (``client/add_wire.LargeAdd``): the parts are what protobuf serializes, the add queue hands the very
object over alone, and a framed call writes the payload object itself. Real bookies read such adds back over the
framed port and over gRPC in ``test_framed_call``."""
from __future__ import annotations

import pytest

from pyspark_ledger.client import framed_call as fc
from pyspark_ledger.client.add_queue import WRITE_ALONE_BYTES, AddQueue
from pyspark_ledger.client.add_wire import SPLIT_PAYLOAD_BYTES, AddEncoder, LargeAdd
from pyspark_ledger.client.batch_window import BatchWindow
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.client.conftest import PASSWORD


def serialized(ledger_id: int, entry_id: int, key: bytes, body: bytes, recovery: bool = False) -> bytes:
    return pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=key, body=body,
                                           recovery=recovery)]).SerializeToString()


@pytest.mark.parametrize("size", [SPLIT_PAYLOAD_BYTES, SPLIT_PAYLOAD_BYTES + 1, 3 << 20])
@pytest.mark.parametrize("entry_id", [0, 16384, 2**40])
def test_a_large_payload_is_kept_apart_and_joins_to_what_protobuf_serializes(size, entry_id):
    head, payload = b"H" * 36, bytes([entry_id % 251]) * size
    add = AddEncoder(9, b"key").encode_pieces(entry_id, head, payload)
    assert type(add) is LargeAdd and add.payload is payload  # the caller's payload itself: no copy
    assert bytes(add) == serialized(9, entry_id, b"key", head + payload)
    assert len(add) == len(bytes(add)) >= WRITE_ALONE_BYTES  # so the add queue always writes it alone


def test_a_smaller_payload_or_a_recovery_add_is_one_bytes():
    encoder = AddEncoder(9, b"key")
    small = encoder.encode_pieces(1, b"H", b"p" * (SPLIT_PAYLOAD_BYTES - 1))
    recovery = encoder.encode_pieces(2, b"H", b"p" * SPLIT_PAYLOAD_BYTES, recovery=True)
    assert type(small) is bytes and small == serialized(9, 1, b"key", b"H" + b"p" * (SPLIT_PAYLOAD_BYTES - 1))
    assert type(recovery) is bytes and recovery == serialized(9, 2, b"key", b"H" + b"p" * SPLIT_PAYLOAD_BYTES, True)
    assert type(encoder.encode(3, b"p" * SPLIT_PAYLOAD_BYTES)) is bytes  # encode: always one bytes


def test_the_add_queue_hands_a_large_add_over_alone_and_as_it_is():
    encoder = AddEncoder(9, b"key")
    small = [encoder.encode(entry_id, b"s" * 100) for entry_id in range(3)]
    large = encoder.encode_pieces(3, b"H", b"L" * SPLIT_PAYLOAD_BYTES)
    after = encoder.encode(4, b"t" * 100)
    queue, window = AddQueue(1 << 20), BatchWindow(8)
    queue.extend(small + [large, after])
    assert queue.take(window) == b"".join(small)
    assert queue.take(window) is large
    assert queue.take(window) == after and not queue


class Recorder:
    def __init__(self) -> None:
        self.writes: list = []

    def write(self, data) -> None:
        self.writes.append(data)


def test_a_framed_call_writes_a_large_add_s_payload_object_itself():
    call = fc.FramedCall.__new__(fc.FramedCall)  # only write_now is exercised: no connection needed
    call._transport = recorder = Recorder()
    payload = b"L" * (1 << 20)
    large = AddEncoder(9, b"key").encode_pieces(7, b"H" * 36, payload)
    call.write_now(large)
    first, second = recorder.writes
    assert first == frames.header(Kind.ADDS, len(large)) + large.head and second is payload
    received = frames.FrameReader(4 << 20).feed(first + second)
    assert received == [(Kind.ADDS, bytes(large))]


@pytest.mark.bookies(4)
def test_large_adds_go_again_whole_to_the_bookie_that_replaces_a_failed_one(client, cluster):
    """An ensemble change sends the unconfirmed adds again from the writer's kept encodings: large ones as the
    ``LargeAdd`` they are, byte for byte (docs/protocol.md W2)."""
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    first, second, third = writer.metadata.current_fragment.bookies
    spare = (set(cluster.bookies) - {first, second, third}).pop()
    payloads = [bytes([index]) * (SPLIT_PAYLOAD_BYTES + 1000 * index) for index in range(6)]
    held_first, held_second = cluster.hold(first, op="add"), cluster.hold(second, op="add")
    futures = [writer.append_async(payload) for payload in payloads]
    cluster.settle()
    cluster.set_down(first)  # its held answers fail: replaced by the spare, which gets all 6 again
    held_second.release()
    assert [future.result(10) for future in futures] == list(range(6))
    assert all(spare in cluster.holders(writer.ledger_id, entry_id) for entry_id in range(6))
    writer.close()
    held_first.release()
    with client.open_ledger(writer.ledger_id, password=PASSWORD) as reader:
        assert [entry.data for entry in reader.read(0, 5)] == payloads
