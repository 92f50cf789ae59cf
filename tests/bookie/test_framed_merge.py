"""Frames of small adds that one receive brought are handed on as one batch (``framed_stream.FramedRequests``,
``merge``; docs/protocol.md W10, W11): in their order, never past ``max_merged_adds`` adds or ``max_merged_bytes``
bytes, never with a large add decoded in place, and the adds before a frame that breaks the rules or before the END are still served.

The reader runs in this process over a socket pair: everything is written before it reads, so that one receive
brings every frame."""
from __future__ import annotations

import socket
import threading

import pytest

from bookie_server.add_wire import ReceivedBatch
from bookie_server.framed_stream import FramedRequests, FramedServerCall, Opened, merge
from bookie_server.limits import Budget
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

ENCODER = AddEncoder(7, b"k" * 20)


def adds(first: int, count: int, size: int = 100) -> bytes:
    return frames.frame(Kind.ADDS, b"".join(ENCODER.encode(entry_id, bytes([entry_id % 256]) * size)
                                            for entry_id in range(first, first + count)))


def read_all(data: bytes, max_merged_adds: int, max_merged_bytes: int = 1 << 20
             ) -> tuple[list[ReceivedBatch], str | None]:
    """Every batch ``FramedRequests`` hands on for ``data`` (written whole first, then the writer half-closes)."""
    server, client = socket.socketpair()
    try:
        rules = frames.ServerRules()
        assert rules.check(Kind.HELLO) is None  # past the handshake, as the listener hands it over
        opened = Opened(frames.FrameReader(64 << 20), rules, [], False)
        requests = FramedRequests(server, opened, FramedServerCall(server, "peer", False), Budget(1 << 30),
                                  max_merged_adds, max_merged_bytes)
        sender = threading.Thread(target=lambda: (client.sendall(data), client.shutdown(socket.SHUT_WR)))
        sender.start()
        sender.join(10)
        batches = list(requests)
        return batches, requests.problem
    finally:
        client.close()
        server.close()


def ids(batches: list[ReceivedBatch]) -> list[list[int]]:
    return [[add.entry_id for add in batch.adds] for batch in batches]


def test_frames_received_together_are_one_batch_in_their_order_sized_as_on_the_wire():
    data = b"".join(adds(entry_id, 1) for entry_id in range(10)) + adds(10, 5)
    batches, problem = read_all(data + frames.end(pb.OK), 1_000)
    assert problem is None
    assert ids(batches) == [list(range(15))]
    assert batches[0].nbytes == len(data) - 11 * frames.HEADER.size and not batches[0].in_place
    assert [bytes(add.body) for add in batches[0].adds] == [bytes([i]) * 100 for i in range(15)]


def test_a_merged_batch_never_holds_more_than_the_limit_and_a_frame_over_it_stays_alone():
    batches, _ = read_all(b"".join(adds(3 * index, 3) for index in range(5)) + frames.end(pb.OK), 7)
    assert list(map(len, ids(batches))) == [6, 6, 3]
    assert sum(ids(batches), []) == list(range(15))
    batches, _ = read_all(adds(0, 3) + adds(3, 10) + adds(13, 3) + frames.end(pb.OK), 7)
    assert list(map(len, ids(batches))) == [3, 10, 3]  # the 10 are the add stream's to refuse (--max-batch-adds)


def test_a_merged_batch_never_holds_more_bytes_than_one_add_batch_may():
    """Never larger than a message the client could have sent (``--max-batch-bytes``), so it fits every budget
    such a message fits."""
    frame_bytes = len(adds(1, 1)) - frames.HEADER.size  # (entry 0 is shorter: proto3 leaves a 0 id out)
    batches, _ = read_all(b"".join(adds(entry_id, 1) for entry_id in range(1, 8)) + frames.end(pb.OK), 1_000,
                          3 * frame_bytes)
    assert list(map(len, ids(batches))) == [3, 3, 1]
    assert max(batch.nbytes for batch in batches) == 3 * frame_bytes


def test_without_merging_each_frame_is_its_own_batch():
    batches, _ = read_all(b"".join(adds(entry_id, 1) for entry_id in range(4)) + frames.end(pb.OK), 1)
    assert ids(batches) == [[0], [1], [2], [3]]


def test_a_large_add_decoded_in_place_is_never_merged():
    batches, _ = read_all(adds(0, 2) + adds(2, 1, size=64 * 1024) + adds(3, 2) + frames.end(pb.OK), 1_000)
    assert ids(batches) == [[0, 1], [2], [3, 4]]
    assert [batch.in_place for batch in batches] == [False, True, False]


@pytest.mark.parametrize("bad, problem", [
    (frames.frame(Kind.ADDS, b"\x0a\xff"), "not an AddBatch"),
    (frames.frame(Kind.HELLO, b""), "HELLO"),
])
def test_the_adds_before_a_frame_that_breaks_the_rules_are_served_first(bad, problem):
    batches, found = read_all(adds(0, 2) + adds(2, 2) + bad + adds(4, 2), 1_000)
    assert ids(batches) == [[0, 1, 2, 3]]
    assert problem in found


def test_a_connection_gone_without_its_end_still_hands_on_what_arrived():
    batches, problem = read_all(adds(0, 2) + adds(2, 1), 1_000)
    assert ids(batches) == [[0, 1, 2]] and problem is None


def test_merge_keeps_both_sizes_and_refuses_in_place_or_over_the_limit():
    small = ReceivedBatch(pb.AddBatch.FromString(adds(0, 2)[frames.HEADER.size:]).adds, 10, False)
    other = ReceivedBatch([pb.AddRequest(entry_id=9)], 4, False)
    assert merge(small, other, 3, 13) is None  # 14 bytes
    joined = merge(small, other, 3, 14)
    assert [add.entry_id for add in joined.adds] == [0, 1, 9] and joined.nbytes == 14 and not joined.in_place
    assert merge(joined, other, 3, 100) is None  # 4 adds
    assert merge(other, ReceivedBatch([pb.AddRequest(entry_id=5)], 4, True), 10, 100) is None
