"""The framed add stream (docs/protocol.md W11) against a real bookie process: handshake, adds and their answers,
the same checks and limits as the gRPC stream, refusals that say why, and what the bookie does at stop."""
from __future__ import annotations

import socket
import struct
import time
import urllib.request

import pytest

from bookie_server.config import parse_args
from bookie_server.framed_listener import HANDSHAKE_TIMEOUT_S
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.bookies import BookieProcess, run_bookie_server
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie.framed_client import Framed

PASSWORD = b"framed"


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def adds_frame(ledger_id: int, first: int, count: int, key: bytes, size: int = 1024) -> bytes:
    codec, encoder = EntryCodec(), AddEncoder(ledger_id, key)
    batch = b"".join(encoder.encode(entry_id, codec.encode(ledger_id, entry_id, entry_id - 1, 0, b"x" * size))
                     for entry_id in range(first, first + count))
    return frames.frame(Kind.ADDS, batch)


@pytest.fixture()
def bookie(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieProcess(tmp_path / "bookie", uri, add_port=0, max_add_streams=3, max_batch_adds=50) as process:
        with open_metadata_store(uri) as store:
            info = store.bookies()[process.bookie_id].info
        with LedgerClient(uri) as client:
            writer = client.create_ledger(1, 1, 1, password=PASSWORD)
            yield process, info["add_port"], writer.ledger_id
            writer.close()


def test_w11_adds_over_the_framed_port_are_stored_and_answered_as_runs(bookie):
    process, port, ledger_id = bookie
    assert port > 0  # registered for clients to find
    with Framed(port) as client:
        assert client.hello() == (frames.VERSION, frames.ANSWER_RUNS, process.bookie_id)
        client.send(adds_frame(ledger_id, 0, 10, master_key(PASSWORD)))
        client.send(adds_frame(ledger_id, 10, 5, master_key(PASSWORD)))
        assert client.answered(15) == {entry_id: pb.OK for entry_id in range(15)}
        client.send(frames.end(pb.OK))
        assert client.end_frame() == (pb.OK, "")
    with LedgerClient(process.metadata_uri) as reader_client:
        with reader_client.open_ledger(ledger_id, password=PASSWORD, recovery=False) as reader:
            # each entry carried the one before it as confirmed: the bookie's LAC is 13
            assert [entry.data for entry in reader.read(0, 13)] == [b"x" * 1024] * 14


def test_w10_frames_that_arrive_together_are_stored_as_fewer_batches_within_max_batch_adds(bookie):
    """A bookie hands the ADDS frames one receive brought to storage together (docs/protocol.md W10), never as a
    batch over --max-batch-adds (50 here: merging the 30 adds below with every one-add frame before them would
    end the stream with BAD_REQUEST)."""
    process, port, ledger_id = bookie
    batches = "bookie_add_latency_seconds_count"  # one observation per storage batch
    before = metric(process.metrics_url, batches)
    key = master_key(PASSWORD)
    with Framed(port) as client:
        client.hello()
        client.send(b"".join(adds_frame(ledger_id, entry_id, 1, key, size=16) for entry_id in range(45))
                    + adds_frame(ledger_id, 45, 30, key, size=16) + frames.end(pb.OK))
        assert client.answered(75) == {entry_id: pb.OK for entry_id in range(75)}
        assert client.end_frame() == (pb.OK, "")
    stored_as = metric(process.metrics_url, batches) - before
    assert 2 <= stored_as < 46  # 46 frames; fewer batches, and the 30 never joined by more than 20


def test_w11_the_same_key_checks_as_grpc_and_answers_one_per_add_without_runs(bookie):
    _, port, ledger_id = bookie
    with Framed(port) as client:
        assert client.hello(flags=0)[1] == 0  # no runs asked, none granted
        client.send(adds_frame(ledger_id, 0, 2, master_key(b"wrong")))
        assert client.answered(2) == {0: pb.UNAUTHORIZED, 1: pb.UNAUTHORIZED}


def test_w11_a_batch_over_max_batch_adds_ends_the_stream_with_bad_request_naming_the_limit(bookie):
    _, port, ledger_id = bookie
    with Framed(port) as client:
        client.hello()
        client.send(adds_frame(ledger_id, 0, 51, master_key(PASSWORD), size=16))
        status, message = client.end_frame()
        assert status == pb.BAD_REQUEST and "50" in message


@pytest.mark.parametrize("first, problem", [
    (frames.frame(Kind.ADDS, b""), "the first frame must be HELLO, not ADDS"),
    (frames.frame(Kind.HELLO, b"GRPCPRI!\0\x01\0\x01"), "magic"),
    (frames.header(Kind.HELLO, frames.MAX_CONTROL_BYTES + 1), "over the limit of 1026"),
    (b"\0\0\0\x01\x09", "unknown frame kind 9"),
])
def test_w11_a_bad_handshake_is_refused_with_bad_request_saying_why(bookie, first, problem):
    _, port, _ = bookie
    with Framed(port) as client:
        client.send(first)
        kind, payload = client.next_frame()
        assert kind is Kind.END
        status, message = frames.parse_end(payload)
        assert status == pb.BAD_REQUEST and problem in message
        with pytest.raises(EOFError):
            client.next_frame()


def test_w11_an_oversized_adds_frame_is_refused_from_its_header(bookie):
    _, port, _ = bookie
    with Framed(port) as client:
        client.hello()
        client.send(frames.header(Kind.ADDS, 2**31))  # 2 GiB announced, none of it sent
        status, message = client.end_frame()
        assert status == pb.BAD_REQUEST and "ADDS frame of 2147483648 bytes: over the limit" in message


def test_w11_bytes_that_are_not_an_add_batch_end_the_stream_with_bad_request(bookie):
    _, port, _ = bookie
    with Framed(port) as client:
        client.hello()
        client.send(frames.frame(Kind.ADDS, b"\x0a\xff\xff\xff\xff\x0f"))  # a field longer than the message
        status, message = client.end_frame()
        assert status == pb.BAD_REQUEST and "not an AddBatch" in message


def hello_when_a_place_is_free(port: int, attempts: int = 100) -> Framed:
    """A connection past its WELCOME, retried while the bookie refuses it TOO_MANY_REQUESTS (a place given back by
    a connection that just ended comes back when its thread is done)."""
    for _ in range(attempts):
        client = Framed(port)
        client.send(frames.hello())
        kind, payload = client.next_frame()
        if kind is Kind.WELCOME:
            return client
        client.close()
        assert frames.parse_end(payload)[0] == pb.TOO_MANY_REQUESTS
        time.sleep(0.1)
    raise AssertionError(f"no place came back after {attempts} tries")


def test_w11_streams_past_max_add_streams_are_refused_at_once_and_the_bookie_serves_on(bookie):
    _, port, ledger_id = bookie
    clients = [Framed(port) for _ in range(3)]
    try:
        for client in clients:
            client.hello()
        with Framed(port) as extra:  # it sends nothing: an END before any HELLO is a refusal at once
            kind, payload = extra.next_frame()
        assert kind is Kind.END
        status, message = frames.parse_end(payload)
        assert status == pb.TOO_MANY_REQUESTS and "--max-add-streams" in message and "3" in message
        clients[0].send(frames.end(pb.OK))
        assert clients[0].end_frame()[0] == pb.OK
        clients[0].close()
        with hello_when_a_place_is_free(port) as again:
            again.send(adds_frame(ledger_id, 0, 1, master_key(PASSWORD)))
            assert again.answered(1) == {0: pb.OK}
    finally:
        for client in clients:
            client.close()


def test_w11_a_client_that_says_nothing_is_dropped_after_the_handshake_timeout(bookie):
    process, port, _ = bookie
    gone = 'bookie_framed_add_connections_total{outcome="gone"}'
    before = metric(process.metrics_url, gone)
    with Framed(port) as client:
        client.sock.settimeout(3 * HANDSHAKE_TIMEOUT_S)  # a bookie that never drops it fails the test
        with pytest.raises(EOFError):
            client.next_frame()
    assert metric(process.metrics_url, gone) == before + 1  # dropped at its handshake, no END owed


def test_w11_a_stopping_bookie_ends_an_open_framed_stream_with_its_adds_answered(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    process = BookieProcess(tmp_path / "bookie", uri, add_port=0).start()
    try:
        with open_metadata_store(uri) as store:
            port = store.bookies()[process.bookie_id].info["add_port"]
        with LedgerClient(uri) as client:
            writer = client.create_ledger(1, 1, 1, password=PASSWORD)
            framed = Framed(port)
            framed.hello()
            framed.send(adds_frame(writer.ledger_id, 0, 3, master_key(PASSWORD)))
            assert framed.answered(3) == {0: pb.OK, 1: pb.OK, 2: pb.OK}
            assert process.stop() == 0
            assert framed.end_frame()[0] == pb.OK
            framed.close()
    finally:
        process.kill()


def test_w11_add_port_is_refused_beside_the_bookie_s_own_port(tmp_path):
    with pytest.raises(SystemExit):
        parse_args(["--data-dir", str(tmp_path), "--port", "4000", "--metadata", "sqlite:///x.db", "--add-port",
                    "4000"])
    result = run_bookie_server(["--data-dir", str(tmp_path), "--port", "4000", "--metadata", "sqlite:///x.db",
                                "--add-port", "4000"])
    assert result.returncode != 0 and "--add-port: 4000 is already --port" in result.stderr


def test_w11_an_add_port_in_use_fails_the_start_naming_the_flag(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
        result = BookieProcess(tmp_path / "bookie", uri, add_port=port).run_to_exit()
    assert result.returncode != 0 and "--add-port" in result.stderr


def test_w11_the_framed_port_is_off_by_default_and_registered_as_0(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieProcess(tmp_path / "bookie", uri) as process:
        with open_metadata_store(uri) as store:
            assert store.bookies()[process.bookie_id].info["add_port"] == 0


def test_w11_a_large_entry_travels_in_one_frame_split_over_many_reads(bookie):
    _, port, ledger_id = bookie
    with Framed(port) as client:
        client.hello()
        data = adds_frame(ledger_id, 0, 1, master_key(PASSWORD), size=3 << 20)
        for start in range(0, len(data), 100_000):
            client.send(data[start:start + 100_000])
        assert client.answered(1) == {0: pb.OK}


def test_w11_a_client_gone_without_its_end_leaves_the_bookie_serving(bookie):
    _, port, ledger_id = bookie
    for round_no in range(5):  # more than --max-add-streams: each place must come back
        client = Framed(port)
        client.hello()
        client.send(adds_frame(ledger_id, round_no, 1, master_key(PASSWORD)))
        assert client.answered(1) == {round_no: pb.OK}
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, no END
        time.sleep(0.3)
    last = Framed(port)
    try:
        last.hello()
    finally:
        last.close()


def test_w11_a_framed_client_that_reads_no_answers_is_read_no_further(tmp_path):
    """The journal thread answers a plaintext framed stream itself when the socket takes the bytes at once
    (bookie_server/answer_outbox.py); a client that never reads its answers must still be held back, as on gRPC:
    the answers it leaves unread stop the bookie from reading its adds, and nothing piles up in the bookie."""
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    with BookieProcess(tmp_path / "bookie", uri, add_port=0, max_batch_adds=1000, checkpoint_interval=0,
                       max_stream_inflight_bytes=1 << 20) as process:
        with open_metadata_store(uri) as store:
            port = store.bookies()[process.bookie_id].info["add_port"]
        with LedgerClient(uri) as client:
            ledger_id = client.create_ledger(1, 1, 1, password=PASSWORD).ledger_id
        batches = [adds_frame(ledger_id, first, 1000, master_key(PASSWORD), size=16)
                   for first in range(0, 1_000_000, 1000)]
        with Framed(port) as raw:
            raw.hello(flags=0)  # one answer per add: the unread answers grow fast
            raw.sock.settimeout(10)
            sent = 0
            try:
                for batch in batches:  # ~80 MB of adds; answers never read
                    raw.sock.sendall(batch)
                    sent += 1
            except socket.timeout:
                pass
            rss_mb = int(next(line.split()[1] for line in open(f"/proc/{process.pid}/status")
                              if line.startswith("VmRSS:"))) // 1024
            assert sent < len(batches), "the bookie kept reading a stream whose answers were not read"
            assert rss_mb < 400, rss_mb
            assert process.is_running()
        with LedgerClient(uri) as client:  # and it serves others meanwhile
            with client.create_ledger(1, 1, 1, password=PASSWORD) as other:
                assert other.append(b"still here") == 0
