"""The client's framed add stream (docs/protocol.md W11): FramedCall against scripted servers for every way a
stream can end, and LedgerClient over real bookies with --add-port, whose adds take the framed port."""
from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request
from pathlib import Path

import grpc.aio
import pytest

from pyspark_ledger.client import ClientConfig, LedgerClient
from pyspark_ledger.client import framed_call as fc
from pyspark_ledger.errors import BookieError, BookieUnavailableError, TooManyRequestsError
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.testing.bookies import BookieCluster
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.client.framed_receive import in_framed_receive


class Scripted:
    """A one-connection server on 127.0.0.1 that reads the HELLO, then sends ``replies`` and closes."""

    def __init__(self, replies: list[bytes], piece: int = 0, hold: threading.Event | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.replies = replies
        self.piece = piece  # > 0: send the replies in pieces of this many bytes, one send each
        self.hold = hold  # set: the replies after the first (the WELCOME) wait until the test sets it
        self.hello: tuple[int, int] | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            reader = frames.FrameReader(1 << 20)
            got: list = []
            while not got:
                got = reader.feed(conn.recv(4096))
            self.hello = frames.parse_hello(got[0][1])
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.hold is not None and self.replies:
                conn.sendall(self.replies[0])
                self.hold.wait(10)
            data = b"".join(self.replies[1:] if self.hold is not None else self.replies)
            step = self.piece or len(data) or 1
            for start in range(0, len(data), step):
                conn.sendall(data[start:start + step])

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 20))


def answers_frame(*entry_ids: int) -> bytes:
    message = pb.AddResultBatch(acked=[pb.AckRun(ledger_id=1, first_entry_id=e, last_entry_id=e) for e in entry_ids])
    return frames.frame(Kind.ANSWERS, message.SerializeToString())


async def read_all(call: fc.FramedCall, via: str, taken_where: list | None = None,
                   handler_set: threading.Event | None = None) -> list:
    """Every answer until the stream's EOF, through ``read`` or through an ``answers_to`` handler; the call's
    failure raised. ``taken_where`` gets, per answer the handler took, whether it ran inside the protocol's
    receive of the bytes (no task woken for it); ``handler_set`` is set once the handler is."""
    answers: list = []
    if via == "read":
        while (answer := await call.read()) is not grpc.aio.EOF:
            answers.append(answer)
        return answers
    await call.open()
    ended = asyncio.get_running_loop().create_future()

    def handler() -> None:
        try:
            while not ended.done() and (answer := call.read_nowait()) is not None:
                if answer is grpc.aio.EOF:
                    ended.set_result(None)
                else:
                    answers.append(answer)
                    if taken_where is not None:
                        taken_where.append(in_framed_receive())
        except BookieError as exc:
            if not ended.done():
                ended.set_exception(exc)
    call.answers_to(handler)
    if handler_set is not None:
        handler_set.set()  # the bookie's answers may come now: each is taken inside the receive of its bytes
    await ended
    call.answers_to(None)
    return answers


@pytest.mark.parametrize("via", ["read", "answers_to"])
def test_w11_answers_then_an_ok_end_read_as_the_stream_s_eof(via):
    """Also through ``answers_to``: answers that arrive once the handler is set are taken in the receive of their
    bytes (docs/measurements.md, "Adds written by the send that queued them, session 28")."""
    server = Scripted([frames.agree(1, frames.ANSWER_RUNS, "b1"), answers_frame(0), answers_frame(1),
                       frames.end(pb.OK)], hold=threading.Event() if via == "answers_to" else None)
    taken_where: list[bool] = []

    async def go():
        call = fc.FramedCall("127.0.0.1", server.port, "b1")
        return call, *await read_all(call, via, taken_where, server.hold)  # up to the END with OK: the EOF

    try:
        call, first, second = run(go())
    finally:
        server.close()
    assert server.hello == (frames.VERSION, frames.ANSWER_RUNS)
    assert call.granted_flags == frames.ANSWER_RUNS
    assert [run.first_entry_id for run in first.acked] == [0] and second.acked[0].first_entry_id == 1
    assert taken_where == ([True, True] if via == "answers_to" else [])


def test_w11_frames_split_anywhere_are_put_back_together():
    """Every frame arrives a byte at a time (each its own send): the call reads whole answers, in order."""
    server = Scripted([frames.agree(1, frames.ANSWER_RUNS, "b1"), *(answers_frame(e) for e in range(5)),
                       frames.end(pb.OK)], piece=1)

    async def go():
        call = fc.FramedCall("127.0.0.1", server.port, "b1")
        answers = []
        while (answer := await call.read()) is not grpc.aio.EOF:
            answers.append(answer.acked[0].first_entry_id)
        return answers
    try:
        assert run(go()) == [0, 1, 2, 3, 4]
    finally:
        server.close()


def test_w11_a_peer_that_does_not_read_holds_writes_back_until_it_does():
    """Past the transport's high-water mark the call no longer writes at once (``may_write_now`` is False) and
    ``write`` waits; once the bookie reads, the held writes go, whole and in order."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got: list = []
    reading = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            reader = frames.FrameReader(1 << 24)
            while not reader.feed(conn.recv(4096)):
                pass
            conn.sendall(frames.agree(1, 0, "b1"))
            reading.wait(20)
            while not got or got[-1][0] is not Kind.END:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                got.extend(reader.feed(chunk))
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def go():
        call = fc.FramedCall("127.0.0.1", port, "b1", answer_runs=False)
        sent = []
        while len(sent) < 256 and (not sent or call.may_write_now()):  # until the kernel's buffers are full
            sent.append(bytes([len(sent) % 256]) * (1 << 20))
            await call.write(sent[-1])
        assert not call.may_write_now(), "256 MiB went out to a peer that reads nothing"
        sent += [b"held-1" * 1000, b"held-2" * 1000]
        rest = asyncio.ensure_future(asyncio.gather(call.write(sent[-2]), call.write(sent[-1])))
        await asyncio.sleep(0.3)
        assert not rest.done()  # held back: the bookie reads nothing yet
        reading.set()
        await rest
        await call.done_writing()
        return sent
    try:
        sent = run(go())
        thread.join(20)
    finally:
        reading.set()
        listener.close()
    assert got == [(Kind.ADDS, batch) for batch in sent] + [(Kind.END, frames.end(pb.OK)[5:])]


def test_w11_a_client_without_runs_asks_for_none():
    server = Scripted([frames.agree(1, 0, "b1"), frames.end(pb.OK)])
    try:
        assert run(fc.FramedCall("127.0.0.1", server.port, "b1", answer_runs=False).read()) is grpc.aio.EOF
    finally:
        server.close()
    assert server.hello == (frames.VERSION, 0)


@pytest.mark.parametrize("replies, error, words, fallback_ok", [
    ([frames.end(pb.TOO_MANY_REQUESTS, "at its limit of 3 (--max-add-streams)")], TooManyRequestsError,
     "--max-add-streams", False),  # the bookie's own refusal: its gRPC port shares the budget
    ([frames.agree(1, 1, "someone-else")], BookieUnavailableError, "answered as bookie 'someone-else'", True),
    ([frames.welcome(1, 0x8000, "b1")], BookieError, "beyond those asked", False),
    ([], BookieUnavailableError, "without an END", False),  # as a TLS bookie at its limit closes
    ([frames.agree(1, 1, "b1"), frames.header(Kind.ANSWERS, fc.MAX_ANSWER_BYTES + 1)], BookieError,
     "over the limit", False),
    ([frames.agree(1, 1, "b1"), frames.frame(Kind.WELCOME, b"")], BookieError, "WELCOME frame not allowed here",
     False),
    ([frames.agree(1, 1, "b1"), frames.frame(Kind.ANSWERS, b"\x0a\xff\xff\xff\x0f")], BookieError,
     "not an AddResultBatch", False),
    ([frames.agree(1, 1, "b1"), frames.end(pb.BAD_REQUEST, "a batch of 51 adds is over --max-batch-adds 50")],
     BookieError, "BAD_REQUEST: a batch of 51 adds", False),
])
@pytest.mark.parametrize("via", ["read", "answers_to"])
def test_w11_every_way_a_stream_ends_badly_is_a_bookie_error_that_says_why(replies, error, words, fallback_ok, via):
    server = Scripted(replies)
    call = None

    async def go():
        nonlocal call
        call = fc.FramedCall("127.0.0.1", server.port, "b1")
        await read_all(call, via)
    try:
        with pytest.raises(error, match=words) as caught:
            run(go())
    finally:
        server.close()
    assert caught.value.bookie_id == "b1"
    assert call.fallback_ok is fallback_ok  # only a port that is not this bookie's may give way to gRPC (W11)
    if error is BookieError:
        assert caught.value.status in (BookieStatus.RPC_FAILED, BookieStatus.BAD_REQUEST)


def test_w11_a_port_nobody_listens_on_is_an_unavailable_bookie():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    call = fc.FramedCall("127.0.0.1", port, "b1")
    with pytest.raises(BookieUnavailableError, match="cannot connect"):
        run(call.write(b"x"))
    assert call.fallback_ok  # nothing was sent: the stream may take the bookie's gRPC port instead (W11)


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.mark.parametrize("framed", [True, False])
def test_w11_a_ledger_client_adds_over_the_framed_port_when_the_bookies_offer_it(tmp_path: Path, framed):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieCluster(3, tmp_path / "bookies", uri, add_port=0) as cluster, \
            LedgerClient(uri, ClientConfig(framed_adds=framed)) as client:
        writer = client.create_ledger(3, 3, 2, password=b"pw")
        futures = [writer.append_async(b"small %d" % index) for index in range(500)]
        assert [future.result(30) for future in futures] == list(range(500))
        mixed = [b"L" * (2 << 20), b"after", b"M" * (64 << 10), b"N" * ((64 << 10) - 1), b"last"]
        # large adds (payloads of 64 KiB or more) travel alone, their payload written as it is (add_wire.LargeAdd)
        assert [future.result(30) for future in map(writer.append_async, mixed)] == list(range(500, 505))
        writer.close()
        with client.open_ledger(writer.ledger_id, password=b"pw") as reader:
            entries = [entry.data for entry in reader.read(0, reader.last_add_confirmed)]
        streamed = [metric(bookie.metrics_url, 'bookie_framed_add_connections_total{outcome="streamed"}')
                    for bookie in cluster]
    assert entries == [b"small %d" % index for index in range(500)] + mixed
    assert all(count >= 1 for count in streamed) if framed else streamed == [0, 0, 0]


def test_w11_a_stream_reopened_after_its_bookie_restarted_on_a_new_add_port_finds_the_new_port(tmp_path: Path):
    from pyspark_ledger.client.bookie_pool import BookiePool
    from pyspark_ledger.entry import EntryCodec, master_key
    from pyspark_ledger.metadata import open_metadata_store

    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2"
    codec, key = EntryCodec(), master_key(b"pw")
    with BookieCluster(1, tmp_path / "bookies", uri, add_port=0) as cluster, LedgerClient(uri) as client, \
            open_metadata_store(uri) as store:
        ledger_id = client.create_ledger(1, 1, 1, password=b"pw").ledger_id
        bookie = cluster[0]
        pool = BookiePool(store, framed_adds=True)
        try:
            pool.bookies()
            stream = pool.stream(bookie.bookie_id)
            assert stream.add(ledger_id, 0, key, codec.encode(ledger_id, 0, -1, 1, b"a")).result(20).ok
            first_port = store.bookies()[bookie.bookie_id].info["add_port"]
            bookie.restart()  # --add-port 0: another free port
            assert store.bookies()[bookie.bookie_id].info["add_port"] != first_port
            with pytest.raises(BookieError):  # the old stream broke with the old process
                stream.add(ledger_id, 1, key, codec.encode(ledger_id, 1, 0, 2, b"b")).result(20)
            pool.forget_stream(bookie.bookie_id, stream)
            again = pool.stream(bookie.bookie_id)
            assert again.add(ledger_id, 1, key, codec.encode(ledger_id, 1, 0, 2, b"b")).result(20).ok
        finally:
            pool.close()
        assert metric(bookie.metrics_url, 'bookie_framed_add_connections_total{outcome="streamed"}') == 1
