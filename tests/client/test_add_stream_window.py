"""An add stream keeps one AddBatch of small adds unanswered by default (docs/protocol.md W10), against a scripted
bookie on 127.0.0.1 that answers a received message only when the test says so: over gRPC, and over the framed
add port (docs/protocol.md W11, the bookie's own framed listener in front of the scripted handler), where the
stream writes straight from the kick or answer that lets a batch go."""
from __future__ import annotations

import socket
import threading
import time
from concurrent import futures

import grpc
import pytest

from bookie_server.framed_listener import FramedListener
from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import encode_add
from pyspark_ledger.client.bookie_rpc import BookieClient
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from tests.client.framed_receive import in_framed_receive
from tests.waiting import wait_until

KEY = b"k" * 20
LEDGER = 7
SETTLE_S = 0.3  # how long a held add is given to (wrongly) leave before the test looks


class ScriptedBookie(pb_grpc.BookieServicer):
    """Records each received AddBatch as its list of entry ids; answers message k (all OK, per add) once
    ``release`` allowed k messages; ends the call when the client half-closed and every message is answered."""

    def __init__(self) -> None:
        self.messages: list[list[int]] = []
        self.half_closed = False
        self._released = 0
        self._cond = threading.Condition()

    def release(self, count: int = 1) -> None:
        with self._cond:
            self._released += count
            self._cond.notify_all()

    def received(self, count: int) -> list[list[int]]:
        wait_until(lambda: len(self.messages) >= count, 10, f"{count} messages at the bookie")
        return self.messages[:count]

    def AddStream(self, request_iterator, context):
        def read() -> None:
            for batch in request_iterator:
                with self._cond:
                    self.messages.append([add.entry_id for add in batch.adds])
                    self._cond.notify_all()
            with self._cond:
                self.half_closed = True
                self._cond.notify_all()
        threading.Thread(target=read, daemon=True).start()
        answered = 0
        while context.is_active():
            with self._cond:
                self._cond.wait_for(lambda: answered < min(self._released, len(self.messages))
                                    or (self.half_closed and answered == len(self.messages)), timeout=0.2)
                if answered < min(self._released, len(self.messages)):
                    ids = self.messages[answered]
                elif self.half_closed and answered == len(self.messages):
                    return
                else:
                    continue
            answered += 1
            yield pb.AddResultBatch(results=[pb.AddResult(ledger_id=LEDGER, entry_id=i, status=pb.OK) for i in ids])


class _NoMetrics:
    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


@pytest.fixture(params=["grpc", "framed"])
def bookie(request):
    scripted = ScriptedBookie()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BookieServicer_to_server(scripted, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    framed = None
    if request.param == "framed":
        framed = FramedListener(scripted, _NoMetrics(), address, "127.0.0.1", 0, 4, 1 << 24)
        framed.start()
    try:
        yield scripted, address, framed.port if framed is not None else 0
    finally:
        if framed is not None:
            framed.close()
            framed.shut_open_connections(1.0)
        server.stop(0).wait(10)


@pytest.fixture
def stream_to(bookie):
    clients: list[BookieClient] = []

    def make(window: int | None):
        client = BookieClient(bookie[1], answer_runs=False)
        clients.append(client)
        return client.add_stream(max_batches_in_flight=window, add_port=bookie[2])
    try:
        yield make
    finally:
        for client in clients:
            client.close()


def add(stream, entry_id: int, size: int = 100):
    return stream.add(LEDGER, entry_id, KEY, b"x" * size)


def still(scripted: ScriptedBookie, count: int) -> bool:
    """Whether the bookie still has only ``count`` messages after held adds were given time to (wrongly) leave."""
    time.sleep(SETTLE_S)
    return len(scripted.messages) == count


def all_ok(futures_) -> bool:
    return all(future.result(10).ok for future in futures_)


def test_adds_queued_behind_an_unanswered_batch_leave_together_when_it_is_answered(bookie, stream_to):
    scripted = bookie[0]
    stream = stream_to(1)
    first = add(stream, 0)
    assert scripted.received(1) == [[0]]
    held = [add(stream, entry_id) for entry_id in range(1, 5)]
    assert still(scripted, 1)  # held back by the window, not sent one by one
    scripted.release()
    assert first.result(10).ok
    assert scripted.received(2) == [[0], [1, 2, 3, 4]]  # the four as one message
    scripted.release()
    assert all_ok(held)


def test_a_window_of_two_keeps_two_batches_unanswered(bookie, stream_to):
    scripted = bookie[0]
    stream = stream_to(2)
    futures_ = [add(stream, 0)]
    scripted.received(1)
    futures_.append(add(stream, 1))
    assert scripted.received(2) == [[0], [1]]
    futures_ += [add(stream, 2), add(stream, 3)]
    assert still(scripted, 2)
    scripted.release()
    assert scripted.received(3) == [[0], [1], [2, 3]]
    scripted.release(2)
    assert all_ok(futures_)


def test_by_default_a_framed_stream_keeps_two_batches_unanswered_and_a_grpc_stream_one(bookie, stream_to):
    """The default window follows the transport (docs/protocol.md W10): a framed stream sends the next add while
    one is unanswered, a gRPC stream holds it."""
    scripted, framed = bookie[0], bool(bookie[2])
    stream = stream_to(None)
    futures_ = [add(stream, 0)]
    scripted.received(1)
    futures_.append(add(stream, 1))
    if framed:
        assert scripted.received(2) == [[0], [1]]
    else:
        assert still(scripted, 1)
    futures_ += [add(stream, 2), add(stream, 3)]
    assert still(scripted, 2 if framed else 1)
    scripted.release()
    assert scripted.received(3 if framed else 2) == ([[0], [1], [2, 3]] if framed else [[0], [1, 2, 3]])
    scripted.release(2)
    assert all_ok(futures_)


def test_a_framed_stream_that_gave_way_to_grpc_takes_the_grpc_window(bookie, stream_to):
    """A framed port that cannot be reached gives way to the gRPC port (docs/protocol.md W11): the stream's
    default window is then gRPC's, one batch."""
    scripted, address, add_port = bookie
    if add_port:
        pytest.skip("one run is enough: the framed port below is never listened on")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    unreachable = closed.getsockname()[1]
    closed.close()  # nothing listens there: connecting is refused
    client = BookieClient(address, answer_runs=False)
    try:
        stream = client.add_stream(max_batches_in_flight=None, add_port=unreachable)
        futures_ = [add(stream, 0)]
        scripted.received(1)
        futures_ += [add(stream, 1), add(stream, 2)]
        assert still(scripted, 1)  # held: one batch in flight, as on gRPC
        scripted.release()
        assert scripted.received(2) == [[0], [1, 2]]
        scripted.release()
        assert all_ok(futures_)
    finally:
        client.close()


def test_a_large_add_is_not_held_back_but_keeps_its_place_behind_held_small_ones(bookie, stream_to):
    scripted = bookie[0]
    stream = stream_to(1)
    futures_ = [add(stream, 0)]
    scripted.received(1)
    futures_.append(add(stream, 1, 64 * 1024))  # large, at the head of the queue: goes at once
    assert scripted.received(2) == [[0], [1]]
    futures_ += [add(stream, 2), add(stream, 3, 64 * 1024)]  # a held small add, then a large one behind it
    assert still(scripted, 2)  # the large add waits behind the small one: the stream keeps its order
    scripted.release()  # answers [0]: [2] may go, then [3] on its own
    assert scripted.received(4) == [[0], [1], [2], [3]]
    scripted.release(3)
    assert all_ok(futures_)


def test_close_sends_the_held_adds_and_waits_for_their_answers_before_half_closing(bookie, stream_to):
    scripted = bookie[0]
    stream = stream_to(1)
    futures_ = [add(stream, 0)]
    scripted.received(1)
    futures_ += [add(stream, 1), add(stream, 2)]
    closer = threading.Thread(target=stream.close, kwargs={"timeout": 10})
    closer.start()
    assert still(scripted, 1) and not scripted.half_closed  # still held: not dropped, not half-closed
    scripted.release(2)
    closer.join(15)
    assert not closer.is_alive()
    assert scripted.messages == [[0], [1, 2]] and scripted.half_closed
    assert all(future.result(0).ok for future in futures_)


def test_a_held_batch_leaves_before_the_listeners_of_the_answer_that_freed_its_place_run(bookie, stream_to):
    """The bookie gets its next batch while the client still hands out the answers that made room for it: a
    listener of the first answer that waits on the loop thread (as slow bookkeeping of a large batch would)
    sees the held batch arrive meanwhile."""
    scripted = bookie[0]
    stream = stream_to(1)
    arrived_while_first_listened: list[bool] = []
    answered: list[int] = []
    done = threading.Event()

    def on_results(bookie_id, results):
        if results[0].entry_id == 0:
            deadline = time.monotonic() + 5
            while len(scripted.messages) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            arrived_while_first_listened.append(len(scripted.messages) >= 2)
        answered.extend(result.entry_id for result in results)
        if len(answered) == 5:
            done.set()

    listener = AddCallbacks(on_results, lambda bookie_id, keys, error: done.set())
    stream.send(LEDGER, [(0, encode_add(LEDGER, 0, KEY, b"x" * 100))], listener)
    scripted.received(1)
    stream.send(LEDGER, [(entry_id, encode_add(LEDGER, entry_id, KEY, b"x" * 100)) for entry_id in range(1, 5)],
                listener)
    assert still(scripted, 1)
    scripted.release(2)
    assert done.wait(10) and answered == [0, 1, 2, 3, 4]
    assert arrived_while_first_listened == [True]
    assert scripted.messages == [[0], [1, 2, 3, 4]]


def test_a_send_on_the_loop_thread_to_an_idle_framed_stream_writes_before_it_returns(bookie, stream_to, monkeypatch):
    """A writer sends from the network thread: when its stream's writer is idle and the window has room, the add
    is written by that ``send`` itself, not one turn of the loop later (the paced add's first write); sent from
    any other thread it goes through the loop, as before."""
    from pyspark_ledger.client import framed_call
    scripted, framed = bookie[0], bool(bookie[2])
    if not framed:
        pytest.skip("gRPC writes only from the stream's coroutine")
    written: list[int] = []
    real_write_now = framed_call.FramedCall.write_now
    monkeypatch.setattr(framed_call.FramedCall, "write_now",
                        lambda call, batch: (written.append(len(batch)), real_write_now(call, batch))[1])
    stream = stream_to(None)
    listener = AddCallbacks(lambda bookie_id, results: None, lambda bookie_id, keys, error: None)
    stream.send(LEDGER, [(0, encode_add(LEDGER, 0, KEY, b"x" * 100))], listener)  # opens the connection
    scripted.received(1)
    scripted.release(1)
    wait_until(lambda: stream.pending == 0, 10, "the first add answered")

    async def send_and_count(entry_id: int) -> int:
        before = len(written)
        stream.send(LEDGER, [(entry_id, encode_add(LEDGER, entry_id, KEY, b"x" * 100))], listener)
        return len(written) - before
    assert stream._io.run(send_and_count(1)) == 1
    assert scripted.received(2) == [[0], [1]]
    scripted.release(1)
    wait_until(lambda: stream.pending == 0, 10, "the second add answered")
    before = len(written)
    stream.send(LEDGER, [(2, encode_add(LEDGER, 2, KEY, b"x" * 100))], listener)  # this thread: the loop writes
    assert scripted.received(3) == [[0], [1], [2]] and len(written) == before + 1
    scripted.release(1)


def test_a_framed_stream_hands_each_answer_to_its_listener_in_the_receive_of_its_bytes(bookie, stream_to):
    """No task is woken per answer on a framed stream (``FramedCall.answers_to``): the listener runs inside the
    protocol's receive of the answer's bytes, one turn of the loop earlier than a reading coroutine would."""
    scripted, framed = bookie[0], bool(bookie[2])
    if not framed:
        pytest.skip("a gRPC stream reads its answers in a coroutine")
    where: list[bool] = []
    done = threading.Event()

    def on_results(bookie_id, results):
        where.append(in_framed_receive())
        if len(where) == 3:
            done.set()
    stream = stream_to(None)
    listener = AddCallbacks(on_results, lambda bookie_id, keys, error: done.set())
    for entry_id in range(3):
        stream.send(LEDGER, [(entry_id, encode_add(LEDGER, entry_id, KEY, b"x" * 100))], listener)
        scripted.received(entry_id + 1)
        scripted.release(1)
        wait_until(lambda: stream.pending == 0, 10, "the add answered")
    assert done.wait(10) and where == [True, True, True]
