"""The framed add port over TLS (docs/protocol.md W11): real bookie processes started with --tls-cert,
--tls-client-ca and --add-port, certificates made at test time. Adds from a client with TLS settings take the
framed port, encrypted; whoever the gRPC port would refuse, the framed port refuses too; and the names of a
verified client certificate are the caller's identity, as on gRPC."""
from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.request

import pytest
import trustme

from bookie_server.framed_tls import TlsConnection
from pyspark_ledger import LedgerClient
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.security.certs import write_tls_files
from pyspark_ledger.security.tls import ClientTls, ServerTls, peer_names
from pyspark_ledger.testing.bookies import BookieCluster
from pyspark_ledger.wire import frames
from tests.recording_socket import RecordingSocket
from tests.waiting import wait_until

STREAMED = 'bookie_framed_add_connections_total{outcome="streamed"}'
BAD_HANDSHAKE = 'bookie_framed_add_connections_total{outcome="bad_handshake"}'


def metric(url: str, name: str) -> float:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the metrics port's own TLS is not tested here
    text = urllib.request.urlopen(url, timeout=10, context=context).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    files = write_tls_files(base / "main", client_name="ledger-admin")
    other = trustme.CA()
    issued = other.issue_cert("intruder")
    other_cert, other_key = base / "other.pem", base / "other-key.pem"
    other_cert.write_bytes(issued.cert_chain_pems[0].bytes())
    issued.private_key_pem.write_to_path(str(other_key))
    other_key.chmod(0o600)
    return {"files": files, "other_cert": str(other_cert), "other_key": str(other_key)}


@pytest.fixture(scope="module")
def cluster(pki, tmp_path_factory):
    base = tmp_path_factory.mktemp("framed-mtls")
    files = pki["files"]
    with BookieCluster(3, base, f"sqlite:///{base}/metadata.db?lease_seconds=5", tls_cert=files.bookie_cert,
                       tls_key=files.bookie_key, tls_client_ca=files.ca, add_port=0) as bookies:
        yield bookies


def good_tls(pki) -> ClientTls:
    files = pki["files"]
    return ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))


def test_w11_a_tls_client_adds_over_the_framed_port_encrypted_and_reads_them_back(cluster, pki):
    before = [metric(bookie.metrics_url, STREAMED) for bookie in cluster]
    with LedgerClient(cluster.metadata_uri, ClientConfig(tls=good_tls(pki))) as client:
        writer = client.create_ledger(3, 3, 2, password=b"pw")
        futures = [writer.append_async(b"small %d" % index) for index in range(300)]
        assert [future.result(30) for future in futures] == list(range(300))
        # large adds, each one frame over many TLS records, back to back (the bookie reads the header after a
        # large frame alone: framed_stream.next_receive), then small ones again
        large = [b"L" * (2 << 20), b"M" * (1 << 20), b"N" * (64 << 10), b"after"]
        assert [future.result(30) for future in map(writer.append_async, large)] == list(range(300, 304))
        writer.close()
        with client.open_ledger(writer.ledger_id, password=b"pw") as reader:
            entries = [entry.data for entry in reader.read(0, reader.last_add_confirmed)]
    assert entries == [b"small %d" % index for index in range(300)] + large
    after = [metric(bookie.metrics_url, STREAMED) for bookie in cluster]
    assert all(now > then for now, then in zip(after, before))  # every bookie took a framed stream


def test_w11_a_client_certificate_of_another_ca_is_refused_on_the_framed_port(cluster, pki):
    intruder = ClientTls(str(pki["files"].ca), pki["other_cert"], pki["other_key"])
    before = metric(cluster[0].metrics_url, BAD_HANDSHAKE)
    with LedgerClient(cluster.metadata_uri, ClientConfig(tls=intruder, add_timeout_s=5.0)) as client:
        with pytest.raises(LedgerError):
            writer = client.create_ledger(3, 3, 2)
            writer.append(b"never")
    wait_until(lambda: metric(cluster[0].metrics_url, BAD_HANDSHAKE) > before, 10, "the refused handshake counted")


def test_w11_plaintext_on_a_tls_framed_port_is_a_bad_handshake_and_the_bookie_serves_on(cluster, pki):
    bookie = cluster[1]
    port = bookie_add_port(cluster, bookie.bookie_id)
    before = metric(bookie.metrics_url, BAD_HANDSHAKE)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(frames.hello())
        conn.recv(1024)  # the bookie answers with a TLS alert, or nothing, and closes
    wait_until(lambda: metric(bookie.metrics_url, BAD_HANDSHAKE) > before, 10, "the plaintext HELLO counted")
    test_w11_a_tls_client_adds_over_the_framed_port_encrypted_and_reads_them_back(cluster, pki)


def bookie_add_port(cluster, bookie_id: str) -> int:
    from pyspark_ledger.metadata import open_metadata_store
    with open_metadata_store(cluster.metadata_uri) as store:
        return store.bookies()[bookie_id].info["add_port"]


def one_tls_connection(server_context, client_context, serve, talk, wrap=lambda conn: conn):
    """A ``TlsConnection`` over one accepted connection (its socket first through ``wrap``), handed to ``serve`` on a
    thread of its own, and the client side of it, handed to ``talk``; what ``talk`` returns."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        conn, _ = listener.accept()
        connection = TlsConnection(wrap(conn), server_context)
        try:
            serve(connection)
        finally:
            connection.close()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1]), timeout=10) as raw:
            with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                result = talk(conn)
        thread.join(10)
    finally:
        listener.close()
    return result


@pytest.mark.parametrize("show_certificate", [True, False])
def test_w11_the_names_of_a_verified_client_certificate_are_the_caller_s_identity(pki, show_certificate):
    """The server side of the framed port's TLS (``TlsConnection``) against Python's own TLS client: with mutual
    TLS its auth context gives ``peer_names`` the client certificate's names; without a certificate shown the
    handshake fails (the port requires one)."""
    files = pki["files"]
    server_context = ServerTls(str(files.bookie_cert), str(files.bookie_key), str(files.ca)).ssl_context()
    client_tls = good_tls(pki) if show_certificate else ClientTls(str(files.ca))
    outcome: dict = {}

    def serve(connection: TlsConnection) -> None:
        try:
            connection.handshake(10)
            outcome["names"] = peer_names(connection.auth_context())
            outcome["echo"] = connection.recv(100)
            connection.sendall(outcome["echo"].upper())
        except OSError as exc:
            outcome["error"] = exc

    def talk(conn) -> bytes | None:
        try:
            conn.sendall(b"hello over tls")
            return conn.recv(100)
        except OSError:
            return None
    reply = one_tls_connection(server_context, client_tls.ssl_context(), serve, talk)
    if show_certificate:
        assert outcome["names"] >= {"ledger-admin"} and reply == b"HELLO OVER TLS"
    else:
        assert isinstance(outcome.get("error"), ssl.SSLError) and not reply


def test_w11_a_tls_connection_reads_its_encrypted_bytes_into_one_buffer_never_a_new_one_per_read(pki):
    files = pki["files"]
    server_context = ServerTls(str(files.bookie_cert), str(files.bookie_key), str(files.ca)).ssl_context()
    expected = b"".join(b"record %03d;" % index for index in range(100))
    received: list[bytes] = []
    recorded: list[RecordingSocket] = []

    def serve(connection: TlsConnection) -> None:
        connection.handshake(10)
        while sum(map(len, received)) < len(expected) and (data := connection.recv(1 << 16)):
            received.append(data)
        connection.sendall(b"ok")

    def talk(conn) -> bytes:
        for index in range(100):  # one TLS record each, most read alone
            conn.sendall(b"record %03d;" % index)
            time.sleep(0.001)
        return conn.recv(2)

    def wrap(conn):
        recorded.append(RecordingSocket(conn))
        return recorded[0]
    assert one_tls_connection(server_context, good_tls(pki).ssl_context(), serve, talk, wrap) == b"ok"
    assert b"".join(received) == expected
    sock = recorded[0]
    assert sock.recv_calls == 0 and len(sock.buffers) > 10
    assert len({id(buffer) for buffer in sock.buffers}) == 1
