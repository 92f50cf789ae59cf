"""The client's range reads on a bookie's framed port (docs/protocol.md W12): real bookie processes, and scripted
servers for the exact frames a bookie could send. Reads that reach the port take it; a port that cannot be used
for reads gives way to gRPC with nothing sent twice; a read that fails once sent fails as the read's own."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import urllib.request

import pytest

from pyspark_ledger.client import BookieClient, ClientConfig, LedgerClient
from pyspark_ledger.client.framed_reads import FramedReads, FramedReadsUnusable
from pyspark_ledger.entry import master_key
from pyspark_ledger.errors import BookieError, BookieUnavailableError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.testing.bookies import BookieCluster, free_port
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

PASSWORD = b"framed-reads"
READS = 'bookie_framed_add_connections_total{outcome="reads"}'
REFUSED = 'bookie_framed_add_connections_total{outcome="refused"}'
BODIES = [bytes([index % 251]) * (300_000 if index % 4 == 0 else 100 + index) for index in range(120)]


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("framed-reads-client")
    uri = f"sqlite:///{base}/metadata.db?lease_seconds=5"
    with BookieCluster(3, base / "bookies", uri, add_port=0, max_read_connections=3) as bookies:
        with LedgerClient(uri) as client:
            writer = client.create_ledger(3, 3, 2, password=PASSWORD)
            for future in [writer.append_async(body) for body in BODIES]:
                future.result(60)
            writer.close()
        yield bookies, writer.ledger_id


def add_port(bookies, bookie) -> int:
    with open_metadata_store(bookies.metadata_uri) as store:
        return store.bookies()[bookie.bookie_id].info["add_port"]


def test_w12_a_reader_reads_over_the_framed_port_the_same_entries_as_over_grpc(cluster):
    bookies, ledger_id = cluster
    before = [metric(bookie.metrics_url, READS) for bookie in bookies]
    results = {}
    for framed in (True, False):
        with LedgerClient(bookies.metadata_uri, ClientConfig(framed_reads=framed)) as client:
            with client.open_ledger(ledger_id, password=PASSWORD, recovery=False) as reader:
                results[framed] = [bytes(entry.data) for entry in reader.read(0, len(BODIES) - 1)]
        if framed:
            opened = [metric(bookie.metrics_url, READS) - then for bookie, then in zip(bookies, before)]
            assert sum(opened) >= 1  # the reads took read connections
            before = [metric(bookie.metrics_url, READS) for bookie in bookies]
    assert results[True] == results[False] == BODIES
    assert [metric(bookie.metrics_url, READS) for bookie in bookies] == before  # framed_reads=False: none opened


def test_w12_reads_waiting_together_open_more_connections_up_to_four_and_all_come_back(cluster):
    bookies, ledger_id = cluster
    bookie = bookies[0]
    with BookieClient(bookie.bookie_id, address=bookie.address, read_port=lambda: add_port(bookies, bookie)) as client:
        futures = [client.read_async(ledger_id, 0, len(BODIES) - 1, master_key=master_key(PASSWORD))
                   for _ in range(6)]
        answers = [future.result(60) for future in futures]
        assert all(answer.ok and len(answer.entries) == len(answers[0].entries) > 10 for answer in answers)
        assert 1 <= client._read_route.current().open_connections <= 3  # within the bookie's --max-read-connections 3


def test_w12_a_port_nothing_listens_on_gives_way_to_grpc_and_is_not_asked_again_for_a_while(cluster, caplog):
    bookies, ledger_id = cluster
    bookie = bookies[1]
    asked = []

    def dead_port() -> int:
        asked.append(time.monotonic())
        return free_port()  # nothing listens there

    with caplog.at_level(logging.INFO, logger="pyspark_ledger.client.framed_reads"):
        with BookieClient(bookie.bookie_id, address=bookie.address, read_port=dead_port) as client:
            for _ in range(3):
                answer = client.read(ledger_id, 0, 5, master_key=master_key(PASSWORD))
                assert answer.ok and [entry_id for entry_id, _ in answer.entries] == list(range(6))
    assert len(asked) == 1  # tried once; then gRPC for FRAMED_RETRY_S
    assert "take its gRPC port instead" in caplog.text


def test_w12_a_bookie_at_its_read_connection_cap_is_read_over_grpc(cluster):
    bookies, ledger_id = cluster
    bookie = bookies[2]
    port = add_port(bookies, bookie)
    held = []
    try:
        for _ in range(3):  # the bookie's --max-read-connections 3, all taken
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(frames.hello(frames.VERSION, frames.READS))
            assert frames.FrameReader(1 << 20).feed(sock.recv(1 << 16))[0][0] is Kind.WELCOME
            held.append(sock)
        refused = metric(bookie.metrics_url, REFUSED)
        with BookieClient(bookie.bookie_id, address=bookie.address, read_port=lambda: port) as client:
            answer = client.read(ledger_id, 3, 9, master_key=master_key(PASSWORD))
            assert answer.ok and len(answer.entries) == 7
        assert metric(bookie.metrics_url, REFUSED) == refused + 1  # asked, refused, then gRPC
    finally:
        for sock in held:
            sock.close()


def test_w12_a_stopped_bookie_times_the_read_out_and_a_new_connection_serves_once_it_runs(cluster):
    bookies, ledger_id = cluster
    bookie = bookies[0]
    with BookieClient(bookie.bookie_id, address=bookie.address, read_port=lambda: add_port(bookies, bookie)) as client:
        assert client.read(ledger_id, 0, 0, master_key=master_key(PASSWORD)).ok  # connected
        bookie.pause()
        try:
            with pytest.raises(BookieUnavailableError) as raised:
                client.read(ledger_id, 1, 1, master_key=master_key(PASSWORD), timeout=1.0)
            assert raised.value.status is BookieStatus.TIMEOUT and "within 1 s" in str(raised.value)
        finally:
            os.kill(bookie.pid, signal.SIGCONT)
        answer = client.read(ledger_id, 2, 2, master_key=master_key(PASSWORD), timeout=20)
        assert answer.ok and answer.entries[0][0] == 2


# --- scripted servers: what a bookie's framed port could answer -------------------------------------------------
class Scripted:
    """Accepts ``connections`` connections on 127.0.0.1, one after the other, and runs ``script(conn, reader)`` on
    each (``script(conn, reader, index)`` when it takes three arguments)."""

    def __init__(self, script, connections: int = 1) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._run, args=(script, connections), daemon=True)
        self.thread.start()

    def _run(self, script, connections: int) -> None:
        for index in range(connections):
            conn, _ = self.server.accept()
            with conn:
                if script.__code__.co_argcount == 3:
                    script(conn, frames.FrameReader(1 << 20), index)
                else:
                    script(conn, frames.FrameReader(1 << 20))

    def close(self) -> None:
        self.server.close()
        self.thread.join(10)


def frames_from(conn, reader, count: int) -> list:
    got: list = []
    while len(got) < count:
        data = conn.recv(1 << 16)
        if not data:
            break
        got += reader.feed(data)
    return got


def run_reads(port: int, *requests: pb.ReadRequest, timeout: float = 10.0):
    """Runs ``FramedReads.read`` of each request at once on a private loop; each outcome (answer or exception)."""
    import asyncio

    async def main():
        reads = FramedReads("127.0.0.1", port, "scripted-bookie")
        try:
            return await asyncio.gather(*(reads.read(request, timeout) for request in requests),
                                        return_exceptions=True)
        finally:
            reads.close()
    return asyncio.run(main())


REQUEST = pb.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=0)


def answer_frame(request_id: int, response: pb.ReadResponse) -> bytes:
    data = response.SerializeToString()
    return frames.read_answer_head(request_id, len(data)) + data


def test_w12_a_bookie_that_does_not_grant_reads_is_unusable_and_nothing_was_sent():
    seen = []

    def script(conn, reader):
        seen.extend(frames_from(conn, reader, 1))
        conn.sendall(frames.welcome(1, 0, "scripted-bookie"))  # an earlier version: no READS granted
        seen.extend(frames_from(conn, reader, 1))

    server = Scripted(script)
    try:
        [outcome] = run_reads(server.port, REQUEST)
    finally:
        server.close()
    assert isinstance(outcome, FramedReadsUnusable) and "does not take reads" in str(outcome)
    assert [kind for kind, _ in seen] == [Kind.HELLO]  # no READ frame ever left


def test_w12_a_welcome_from_another_bookie_is_unusable():
    server = Scripted(lambda conn, reader: (frames_from(conn, reader, 1),
                                            conn.sendall(frames.welcome(1, frames.READS, "someone-else")),
                                            frames_from(conn, reader, 1)))
    try:
        [outcome] = run_reads(server.port, REQUEST)
    finally:
        server.close()
    assert isinstance(outcome, FramedReadsUnusable) and "stale" in str(outcome)


def test_w12_large_and_small_answers_reach_their_reads_whatever_order_the_bytes_arrive_in():
    large = pb.ReadResponse(status=pb.OK, entries=[pb.Entry(entry_id=5, body=os.urandom(3 << 20))])
    small = pb.ReadResponse(status=pb.NO_SUCH_ENTRY, message="none", last_add_confirmed=4, last_entry_id=4)

    def script(conn, reader):
        frames_from(conn, reader, 1)
        conn.sendall(frames.welcome(1, frames.READS, "scripted-bookie"))
        reads = frames_from(conn, reader, 3)
        ids = [frames.split_request_id(payload)[0] for _, payload in reads]
        data = answer_frame(ids[0], large) + answer_frame(ids[1], small) + answer_frame(ids[2], large)
        for start in range(0, len(data), 77_777):  # the answers cut across their frames' boundaries
            conn.sendall(data[start:start + 77_777])
        frames_from(conn, reader, 1)

    server = Scripted(script)
    try:
        outcomes = run_reads(server.port, REQUEST, REQUEST, REQUEST)
    finally:
        server.close()
    assert [bytes(entry.body) for entry in outcomes[0].entries] == [large.entries[0].body]
    assert (outcomes[1].status, outcomes[1].message, outcomes[1].last_entry_id) == (pb.NO_SUCH_ENTRY, "none", 4)
    assert bytes(outcomes[2].entries[0].body) == large.entries[0].body


@pytest.mark.parametrize("bad, problem", [
    (lambda ids: answer_frame(ids[0] + 1, pb.ReadResponse()), "answers no read waiting in that order"),
    (lambda ids: frames.header(Kind.READ_ANSWER, 1 << 30), "over the limit"),
    (lambda ids: frames.header(Kind.ANSWERS, 1 << 20), "ANSWERS frame of 1048576 bytes on a read connection"),
    (lambda ids: frames.frame(Kind.READ_ANSWER, b"\x00"), "request id"),
    (lambda ids: frames.read_answer_head(ids[0], 6) + b"\x0a\xff\xff\xff\xff\x0f", "not a ReadResponse"),
])
def test_w12_a_frame_this_client_cannot_take_fails_the_read_with_rpc_failed(bad, problem):
    def script(conn, reader):
        frames_from(conn, reader, 1)
        conn.sendall(frames.welcome(1, frames.READS, "scripted-bookie"))
        reads = frames_from(conn, reader, 1)
        conn.sendall(bad([frames.split_request_id(payload)[0] for _, payload in reads]))
        frames_from(conn, reader, 1)

    server = Scripted(script)
    try:
        [outcome] = run_reads(server.port, REQUEST)
    finally:
        server.close()
    assert isinstance(outcome, BookieError) and outcome.status is BookieStatus.RPC_FAILED
    assert problem in str(outcome)


def test_w12_a_connection_that_breaks_fails_its_waiting_reads_as_an_unavailable_bookie():
    def script(conn, reader):
        frames_from(conn, reader, 1)
        conn.sendall(frames.welcome(1, frames.READS, "scripted-bookie"))
        frames_from(conn, reader, 2)  # then the connection closes, nothing answered

    server = Scripted(script)
    try:
        outcomes = run_reads(server.port, REQUEST, REQUEST)
    finally:
        server.close()
    assert all(isinstance(outcome, BookieUnavailableError) and outcome.status is BookieStatus.UNAVAILABLE
               and "without an END" in str(outcome) for outcome in outcomes)


def test_w12_a_read_that_crossed_the_bookie_s_idle_end_is_sent_once_more_on_a_new_connection():
    answered = pb.ReadResponse(status=pb.OK, last_add_confirmed=9, last_entry_id=9)
    reads_seen = []

    def script(conn, reader, index):
        frames_from(conn, reader, 1)
        conn.sendall(frames.welcome(1, frames.READS, "scripted-bookie"))
        [(_, payload)] = frames_from(conn, reader, 1)
        request_id = frames.split_request_id(payload)[0]
        reads_seen.append(request_id)
        if index == 0:  # as a bookie that decided the connection was idle just as the READ came: unread, ended
            conn.sendall(frames.end(pb.OK, "the read connection was idle for 60 s"))
        else:
            conn.sendall(answer_frame(request_id, answered))
            frames_from(conn, reader, 1)

    server = Scripted(script, connections=2)
    try:
        [outcome] = run_reads(server.port, REQUEST)
    finally:
        server.close()
    assert (outcome.status, outcome.last_entry_id) == (pb.OK, 9) and len(reads_seen) == 2


def test_w12_a_read_that_met_an_end_of_another_status_is_not_sent_again():
    def script(conn, reader):
        frames_from(conn, reader, 1)
        conn.sendall(frames.welcome(1, frames.READS, "scripted-bookie"))
        frames_from(conn, reader, 1)
        conn.sendall(frames.end(pb.BAD_REQUEST, "no"))
        frames_from(conn, reader, 1)

    server = Scripted(script)
    try:
        [outcome] = run_reads(server.port, REQUEST)
    finally:
        server.close()
    assert isinstance(outcome, BookieError) and "BAD_REQUEST: no" in str(outcome)


def test_w12_a_read_waits_for_a_connection_no_longer_than_its_own_timeout():
    def script(conn, reader):  # a port that takes the connection and never answers the HELLO
        frames_from(conn, reader, 1)
        frames_from(conn, reader, 1)

    server = Scripted(script)
    started = time.monotonic()
    try:
        [outcome] = run_reads(server.port, REQUEST, timeout=0.5)
    finally:
        server.close()
    assert isinstance(outcome, BookieUnavailableError) and outcome.status is BookieStatus.TIMEOUT
    assert "not open within the read's 0.5 s" in str(outcome)
    assert time.monotonic() - started < 5  # the handshake's own limit is 10 s
