"""Range reads on the framed port (docs/protocol.md W12) against a real bookie process: the same answers as the gRPC
port, in order under their ids, the same key checks, refusals that say why, and the read-connection cap."""
from __future__ import annotations

import socket
import threading
import urllib.request

import pytest

from bookie_server.framed_reads import FramedReadCall, serve_reads
from pyspark_ledger.client import BookieClient, LedgerClient
from pyspark_ledger.client.read_wire import decode_read_response
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.status import as_status
from pyspark_ledger.testing.bookies import BookieProcess
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie.framed_client import Framed

PASSWORD = b"framed-reads"
BODIES = [bytes([index]) * (50_000 if index % 3 == 0 else 200) for index in range(30)]  # large and small


def read_request(ledger_id: int, first: int, last: int, key: bytes = master_key(PASSWORD), **fields) -> bytes:
    return pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last, master_key=key,
                          **fields).SerializeToString()


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def bookie(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("framed-reads")
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieProcess(tmp_path / "bookie", uri, add_port=0, max_add_streams=2, max_read_connections=2) as process:
        with open_metadata_store(uri) as store:
            info = store.bookies()[process.bookie_id].info
        with LedgerClient(uri) as client:
            writer = client.create_ledger(1, 1, 1, password=PASSWORD)
            for body in BODIES:
                writer.append(body)
            writer.close()
        yield process, info["add_port"], writer.ledger_id


def test_w12_reads_sent_together_are_answered_in_order_under_their_ids_as_the_grpc_port_answers(bookie):
    process, port, ledger_id = bookie
    asked = [(0, 29, {}), (3, 3, {}), (1, 20, {"entry_step": 3}), (0, 29, {"max_bytes": 120_000}), (40, 45, {})]
    with BookieClient(process.bookie_id, address=process.address) as grpc_client, Framed(port) as client:
        assert client.hello(frames.READS) == (frames.VERSION, frames.READS, process.bookie_id)
        client.send(b"".join(frames.read_frame(1000 + index, read_request(ledger_id, first, last, **fields))
                             for index, (first, last, fields) in enumerate(asked)))
        for index, (first, last, fields) in enumerate(asked):
            request_id, message = client.answer()
            assert request_id == 1000 + index
            framed = decode_read_response(message)
            over_grpc = grpc_client.read(ledger_id, first, last, master_key=master_key(PASSWORD), **fields)
            assert as_status(framed.status) is over_grpc.status
            assert [(entry.entry_id, bytes(entry.body)) for entry in framed.entries] == \
                [(entry_id, bytes(body)) for entry_id, body in over_grpc.entries]
            assert (framed.last_add_confirmed, framed.last_entry_id) == \
                (over_grpc.last_add_confirmed, over_grpc.last_entry_id)
        assert len(decode_read_response(message).entries) == 0  # the last asked past the ledger's end
        client.send(frames.end(pb.OK))
        assert client.end_frame() == (pb.OK, "")


def test_w12_the_first_answer_holds_every_entry_asked_large_and_small(bookie):
    _, port, ledger_id = bookie
    with Framed(port) as client:
        client.hello(frames.READS)
        client.send(frames.read_frame(7, read_request(ledger_id, 0, 29)))
        request_id, message = client.answer()
        answer = decode_read_response(message)
        assert request_id == 7 and answer.status == pb.OK
        codec = EntryCodec(password=PASSWORD)  # digests checked: the bytes the bookie stored, whole
        assert [codec.decode(bytes(entry.body), ledger_id, entry.entry_id).payload
                for entry in answer.entries] == BODIES


def test_w12_the_same_key_checks_as_grpc(bookie):
    _, port, ledger_id = bookie
    with Framed(port) as client:
        client.hello(frames.READS)
        client.send(frames.read_frame(1, read_request(ledger_id, 0, 3, key=master_key(b"wrong"))))
        client.send(frames.read_frame(2, read_request(ledger_id, 0, 3, key=b"")))  # no key, no admin identity
        for request_id in (1, 2):
            answered_id, message = client.answer()
            answer = pb.ReadResponse.FromString(message)
            assert answered_id == request_id and answer.status == pb.UNAUTHORIZED and not answer.entries


@pytest.mark.parametrize("sent, problem", [
    (frames.frame(Kind.ADDS, b"\x0a\x00"), "ADDS frame not allowed here"),
    (frames.header(Kind.ADDS, 64 << 20), "ADDS frame of 67108864 bytes: over the limit of 1026"),
    (frames.header(Kind.READ, frames.MAX_READ_REQUEST_BYTES + 1), "READ frame of 1025 bytes: over the limit of 1024"),
    (frames.frame(Kind.READ, b"\x00\x01"), "request id"),
    (frames.frame(Kind.READ, b"\x00\x00\x00\x05\x0a\xff\xff\xff\xff\x0f"), "READ frame 5 does not hold a ReadRequest"),
    (frames.frame(Kind.HELLO, frames.hello()[5:]), "HELLO frame not allowed here"),
])
def test_w12_a_frame_a_read_connection_may_not_send_ends_it_with_bad_request_saying_why(bookie, sent, problem):
    _, port, _ = bookie
    with Framed(port) as client:
        client.hello(frames.READS)
        client.send(sent)  # the oversized ones announce megabytes and send none: refused from the header
        status, message = client.end_frame()
        assert status == pb.BAD_REQUEST and problem in message, message
        with pytest.raises(EOFError):
            client.next_frame()


def test_w12_read_connections_past_their_cap_are_refused_before_any_welcome_and_leave_add_streams_free(bookie):
    process, port, ledger_id = bookie
    refused = 'bookie_framed_add_connections_total{outcome="refused"}'
    before = metric(process.metrics_url, refused)
    readers = [Framed(port) for _ in range(2)]
    try:
        for reader in readers:
            reader.hello(frames.READS)
        with Framed(port) as extra:
            extra.send(frames.hello(frames.VERSION, frames.READS))
            kind, payload = extra.next_frame()
            assert kind is Kind.END  # the first frame: no WELCOME before it
            status, message = frames.parse_end(payload)
        assert status == pb.TOO_MANY_REQUESTS and "--max-read-connections" in message and "2" in message
        assert metric(process.metrics_url, refused) == before + 1
        # both add-stream places (--max-add-streams 2) are free: the read connections gave theirs back
        adders = [Framed(port) for _ in range(2)]
        try:
            for adder in adders:
                assert adder.hello(frames.ANSWER_RUNS)[1] == frames.ANSWER_RUNS
        finally:
            for adder in adders:
                adder.close()
        readers[0].send(frames.read_frame(9, read_request(ledger_id, 3, 3)))
        assert readers[0].answer()[0] == 9  # the open ones still read
    finally:
        for reader in readers:
            reader.close()


def test_w12_reads_count_as_reads_in_the_bookies_metrics(bookie):
    process, port, ledger_id = bookie
    served = 'bookie_read_requests_total{status="OK"}'
    connections = 'bookie_framed_add_connections_total{outcome="reads"}'
    before, opened = metric(process.metrics_url, served), metric(process.metrics_url, connections)
    with Framed(port) as client:
        client.hello(frames.READS)
        client.send(frames.read_frame(1, read_request(ledger_id, 0, 1))
                    + frames.read_frame(2, read_request(ledger_id, 2, 2)))
        client.answer(), client.answer()
    assert metric(process.metrics_url, served) == before + 2
    assert metric(process.metrics_url, connections) == opened + 1


# --- serve_reads alone, over a socket pair: the idle end, a client that takes nothing, a connection gone ---------
def serve_pair(read, idle_s: float):
    server, client = socket.socketpair()
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(serve_reads(
        server, frames.FrameReader(64 << 20), [], read, FramedReadCall("pair", dict), idle_s)), daemon=True)
    thread.start()
    return server, client, thread, outcome


def test_w12_a_read_connection_idle_for_its_timeout_is_ended_with_ok():
    server, client, thread, outcome = serve_pair(lambda request, call: pb.ReadResponse(status=pb.OK), 0.3)
    try:
        thread.join(10)
        assert outcome == [(pb.OK, "the read connection was idle for 0.3 s")]
    finally:
        server.close(), client.close()


def test_w12_a_client_that_takes_no_byte_of_its_answer_loses_its_connection():
    big = pb.ReadResponse(status=pb.OK, entries=[pb.Entry(entry_id=0, body=b"x" * (32 << 20))])
    server, client, thread, outcome = serve_pair(lambda request, call: big, 0.5)
    try:
        client.sendall(frames.read_frame(1, read_request(1, 0, 0)))  # and never reads the 32 MiB answer
        thread.join(20)
        assert not thread.is_alive() and outcome == [None]  # given up: nothing more to send it
    finally:
        server.close(), client.close()


def test_w12_the_handler_sees_the_callers_identity_and_a_connection_gone_ends_the_loop():
    seen = []

    def read(request, call):
        seen.append((request.ledger_id, call.auth_context(), call.peer()))
        return pb.ReadResponse(status=pb.OK)

    server, client, thread, outcome = serve_pair(read, 30)
    try:
        client.sendall(frames.read_frame(4, read_request(77, 0, 0)))
        reader = frames.FrameReader(1 << 20)
        received: list = []
        while not received:
            received += reader.feed(client.recv(1 << 16))
        assert received[0][0] is Kind.READ_ANSWER and frames.split_request_id(received[0][1])[0] == 4
        client.close()
        thread.join(10)
        assert outcome == [None] and seen == [(77, {}, "pair")]
    finally:
        server.close()


def test_w12_at_stop_an_idle_read_connection_is_ended_at_once():
    from bookie_server.framed_listener import FramedListener

    class Servicer:
        def Read(self, request, context):
            return pb.ReadResponse(status=pb.OK)

    class Metrics:
        def __getattr__(self, name):
            return lambda *args: None

    listener = FramedListener(Servicer(), Metrics(), "127.0.0.1:1", "127.0.0.1", 0, 4, 1 << 20, max_read_connections=4)
    listener.start()
    try:
        with Framed(listener.port) as reader:
            reader.hello(frames.READS)
            reader.send(frames.read_frame(1, read_request(1, 0, 0)))
            assert reader.answer()[0] == 1  # served, then idle in its 60 s wait for the next READ
            listener.close()
            done = threading.Event()
            threading.Thread(target=lambda: (listener.shut_open_connections(wait_s=60), done.set()),
                             daemon=True).start()
            assert done.wait(20), "the stop waited for an idle read connection"
            with pytest.raises(EOFError):
                reader.next_frame()
    finally:
        listener.close()
