"""A large frame on the framed add port (docs/protocol.md W11) is read straight into its own buffer as soon as its
header arrived when the bookie-wide budget of frames arriving grants its size, and that budget is given back once
the frame is whole or its connection broke mid-frame; past the budget the frame waits for half of its bytes, as
before, and arrives all the same (``bookie_server/framed_stream.py``, ``limits.arriving_frames_bytes``).

The reader runs in this process over a socket pair, so the budget can be watched while a frame is half sent."""
from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from bookie_server.framed_stream import (LARGE_FRAME_BYTES, RECEIVE_BYTES, FramedRequests, FramedServerCall, Opened,
                                         next_receive)
from bookie_server.limits import Budget, arriving_frames_bytes
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.entry import EntryCodec
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from tests.recording_socket import RecordingSocket

BODY = 256 * 1024


def add_frame(entry_id: int = 0) -> bytes:
    body = EntryCodec().encode(7, entry_id, entry_id - 1, 0, bytes(range(256)) * (BODY // 256))
    return frames.frame(Kind.ADDS, AddEncoder(7, b"k" * 20).encode(entry_id, body))


class SpyReader(frames.FrameReader):
    """Notes, of each large frame handed over, how many of its payload's bytes came through the reader first."""

    __slots__ = ("taken",)

    def __init__(self, max_payload: int) -> None:
        super().__init__(max_payload)
        self.taken: list[int] = []

    def large_frame(self, at_least, reserve=None):
        result = super().large_frame(at_least, reserve)
        if result is not None:
            self.taken.append(len(result[2]))
        return result


class Reading:
    """``FramedRequests`` over one end of a socket pair, iterated on a thread of its own; the test writes the other."""

    def __init__(self, budget: Budget) -> None:
        server, self.client = socket.socketpair()
        self.server = RecordingSocket(server)
        rules = frames.ServerRules()
        assert rules.check(Kind.HELLO) is None  # past the handshake, as the listener hands it over
        self.reader = SpyReader(64 << 20)
        opened = Opened(self.reader, rules, [], False)
        self.call = FramedServerCall(self.server, "peer", False)
        self.ended = threading.Event()
        self.call.add_callback(self.ended.set)
        self.requests = FramedRequests(self.server, opened, self.call, budget)
        self.batches: list = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for batch in self.requests:
            self.batches.append(batch)

    def close(self) -> None:
        for end in (self.client, self.server):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
        self.thread.join(10)


@pytest.fixture()
def reading():
    made: list[Reading] = []

    def start(budget: Budget) -> Reading:
        made.append(Reading(budget))
        return made[-1]
    yield start
    for one in made:
        one.close()


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout} s: {what}")
        time.sleep(0.005)


def test_a_granted_frame_holds_its_size_of_the_budget_until_it_is_whole(reading):
    budget = Budget(1 << 20)
    one = reading(budget)
    frame = add_frame()
    one.client.sendall(frame[:100])  # the header and a sliver: far from half
    size = len(frame) - 5
    wait_for(lambda: budget.used == size, "the frame's size taken from the budget")
    one.client.sendall(frame[100:])
    wait_for(lambda: len(one.batches) == 1, "the frame read")
    assert budget.used == 0
    (add,) = one.batches[0].adds
    assert add.entry_id == 0 and len(add.body) > BODY


def test_a_connection_broken_mid_frame_gives_its_size_back(reading):
    budget = Budget(1 << 20)
    one = reading(budget)
    frame = add_frame()
    one.client.sendall(frame[:100])
    wait_for(lambda: budget.used == len(frame) - 5, "the frame's size taken from the budget")
    one.client.close()  # gone mid-frame
    assert one.ended.wait(10), "the call did not end"
    one.thread.join(10)
    assert budget.used == 0 and one.batches == []


def test_past_the_budget_a_frame_waits_for_half_of_it_and_still_arrives(reading):
    budget = Budget(1 << 20)
    assert budget.try_take((1 << 20) - 1000)  # others hold nearly all of it
    one = reading(budget)
    frames_sent = [add_frame(entry_id) for entry_id in range(3)]
    for frame in frames_sent:
        for start in range(0, len(frame), 50_000):  # in pieces, so that it arrives below half first
            one.client.sendall(frame[start:start + 50_000])
            time.sleep(0.001)
    wait_for(lambda: len(one.batches) == 3, "the frames read")
    assert budget.used == (1 << 20) - 1000
    assert [batch.adds[0].entry_id for batch in one.batches] == [0, 1, 2]


def test_the_budget_is_a_quarter_of_the_in_flight_bytes_and_at_least_one_largest_frame():
    assert arriving_frames_bytes(512 << 20, 20 << 20) == 128 << 20
    assert arriving_frames_bytes(40 << 20, 20 << 20) == 20 << 20
    assert LARGE_FRAME_BYTES <= BODY  # the frames above are large ones


def test_after_a_large_frame_the_next_header_is_read_alone_so_the_next_large_frame_is_copied_nowhere(reading):
    budget = Budget(1 << 20)
    one = reading(budget)
    taken = one.reader.taken
    one.client.sendall(b"".join(add_frame(entry_id) for entry_id in range(4)))  # back to back, in one go
    wait_for(lambda: len(one.batches) == 4, "the frames read")
    assert taken[1:] == [0, 0, 0], taken
    assert [batch.adds[0].entry_id for batch in one.batches] == [0, 1, 2, 3] and budget.used == 0


def test_a_large_frame_after_a_large_frame_is_one_receive_into_a_buffer_never_zero_filled(reading):
    one = reading(Budget(1 << 20))
    one.client.sendall(b"".join(add_frame(entry_id) for entry_id in range(3)))
    wait_for(lambda: len(one.batches) == 3, "the frames read")
    assert [batch.adds[0].entry_id for batch in one.batches] == [0, 1, 2]
    assert [bytes(batch.adds[0].body) for batch in one.batches] == [
        EntryCodec().encode(7, e, e - 1, 0, bytes(range(256)) * (BODY // 256)) for e in range(3)]
    # the 2nd and 3rd payloads: nothing of them came through the reader, so each is one recv that waits for all
    # of it into a new bytes object (a bytearray is zero-filled first, a megabyte per 1 MiB add, only to be
    # overwritten); the 1st began in the reader's buffer and is completed in a bytearray
    assert one.server.recv_args == [(len(add_frame(e)) - frames.HEADER.size, socket.MSG_WAITALL) for e in (1, 2)]
    assert [type(batch.adds[0].body.obj) for batch in one.batches] == [bytearray, bytes, bytes]


def test_a_connection_broken_in_a_large_frame_read_in_one_receive_ends_the_call(reading):
    budget = Budget(1 << 20)
    one = reading(budget)
    second = add_frame(1)
    one.client.sendall(add_frame(0) + second[:len(second) // 2])  # the second one's receive returns cut short
    wait_for(lambda: len(one.batches) == 1 and one.server.recv_args, "the first frame read, the second begun")
    one.client.shutdown(socket.SHUT_WR)
    wait_for(one.ended.is_set, "the call ended")
    assert budget.used == 0 and len(one.batches) == 1 and one.requests.problem is None


def small_frame(entry_id: int) -> bytes:
    body = EntryCodec().encode(7, entry_id, entry_id - 1, 0, b"s" * 100)
    return frames.frame(Kind.ADDS, AddEncoder(7, b"k" * 20).encode(entry_id, body))


@pytest.mark.parametrize("seed", range(4))
def test_large_and_small_frames_mixed_and_split_anywhere_arrive_whole_and_in_order(reading, seed):
    rng = random.Random(seed)
    budget = Budget(1 << 20)
    one = reading(budget)
    kinds = [rng.choice("LLS") for _ in range(12)]
    data = b"".join((add_frame if kind == "L" else small_frame)(entry_id) for entry_id, kind in enumerate(kinds))
    position = 0
    while position < len(data):  # pieces of 1 byte to 300 KiB: headers split, frames joined
        step = rng.choice([1, 2, 5, 7, 100, 4096, 65536, 300_000])
        one.client.sendall(data[position:position + step])
        position += step
    wait_for(lambda: sum(len(batch.adds) for batch in one.batches) == len(kinds), "the frames read")
    assert [add.entry_id for batch in one.batches for add in batch.adds] == list(range(len(kinds)))
    assert budget.used == 0


def test_small_frames_are_read_into_one_buffer_of_the_connection_never_a_new_one_per_receive(reading):
    # a new bytes object per recv made glibc map and unmap RECEIVE_BYTES per add where its thresholds were not raised
    one = reading(Budget(1 << 20))
    data = b"".join(small_frame(entry_id) for entry_id in range(200))
    for start in range(0, len(data), 1000):
        one.client.sendall(data[start:start + 1000])
        time.sleep(0.001)  # many receives
    wait_for(lambda: sum(len(batch.adds) for batch in one.batches) == 200, "the frames read")
    assert [add.entry_id for batch in one.batches for add in batch.adds] == list(range(200))
    assert one.server.recv_calls == 0
    assert len(one.server.buffers) > 10
    assert len({id(buffer) for buffer in one.server.buffers}) == 1
    assert len(one.server.buffers[0]) == RECEIVE_BYTES


def test_the_next_receive_is_the_header_alone_only_after_a_large_frame():
    assert next_receive(False, 0) == RECEIVE_BYTES
    assert next_receive(True, 0) == frames.HEADER.size
    assert next_receive(True, 2) == frames.HEADER.size - 2  # the rest of a header that came in pieces
    assert next_receive(True, frames.HEADER.size) == RECEIVE_BYTES
