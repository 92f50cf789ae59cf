"""Issue 13 part 2, bookie side: every data operation needs the ledger's master key or an admin identity.

Raw gRPC against real bookie processes: per operation (add, read, range read, fencing read, recovery read,
read-LAC, long poll, write-LAC), no key and a wrong key are answered UNAUTHORIZED with no data and no ledger
state, and counted in /metrics; the right key is served. Over mutual TLS, with certificates made here, a
client certificate named by --admin-identity reads, LAC-reads, long-polls, writes the LAC of and fences a
stored ledger without its key; a non-admin certificate without the key is refused; an admin's plain add
without the key is refused, its key-less recovery write-back of a stored ledger is accepted.
"""
from __future__ import annotations

import contextlib

import os
import socket
import ssl
import stat
import time
import urllib.request

import grpc
import pytest

from bookie_server.config import parse_args
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.security.certs import CertificateAuthority
from pyspark_ledger.security.tls import ClientTls
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

from .conftest import KEY, WRONG_KEY, entry

LEDGER = 41
ENTRIES = 5  # entries 0..4, each carrying LAC entry-1: the bookie's LAC is 3
ADMIN = "repair-tool"
#: operation -> the ``op`` label its refusals are counted under
OPS = {"read": "read", "range_read": "read", "recovery_read": "read", "fencing_read": "fence",
       "read_lac": "read_lac", "long_poll": "read_lac", "write_lac": "write_lac"}
LONG_POLL_MS = 5_000


def add_batch(stub, adds: list[pb.AddRequest]) -> dict[tuple[int, int], pb.AddResult]:
    results = {}
    for response in stub.AddStream(iter([pb.AddBatch(adds=adds)]), timeout=30):
        for result in response.results:
            results[(result.ledger_id, result.entry_id)] = result
    return results


def write_ledger(stub, ledger_id: int = LEDGER) -> None:
    adds = [pb.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=KEY, body=entry(ledger_id, e))
            for e in range(ENTRIES)]
    assert {result.status for result in add_batch(stub, adds).values()} == {pb.OK}


def call(stub, op: str, key: bytes, ledger_id: int = LEDGER):
    """One request of kind ``op`` with ``key``; returns the response."""
    if op in ("read", "range_read", "recovery_read", "fencing_read"):
        last = ENTRIES - 1 if op == "range_read" else 0
        return stub.Read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=last, master_key=key,
                                        fence=op == "fencing_read", recovery=op in ("recovery_read", "fencing_read")),
                         timeout=30)
    if op == "read_lac":
        return stub.ReadLac(pb.ReadLacRequest(ledger_id=ledger_id, master_key=key), timeout=30)
    if op == "long_poll":
        return stub.ReadLac(pb.ReadLacRequest(ledger_id=ledger_id, master_key=key, has_previous=True,
                                              previous_lac=ENTRIES, timeout_ms=LONG_POLL_MS), timeout=30)
    assert op == "write_lac"
    return stub.WriteLac(pb.WriteLacRequest(ledger_id=ledger_id, master_key=key, last_add_confirmed=ENTRIES - 1),
                         timeout=30)


def assert_refused(response, words: str) -> None:
    """UNAUTHORIZED, saying why, and nothing of the ledger: no entries, LAC -1, not fenced."""
    assert response.status == pb.UNAUTHORIZED, response
    assert words in response.message, response.message
    assert response.last_add_confirmed == -1 and not response.fenced, response
    assert not getattr(response, "entries", ()), response
    if hasattr(response, "last_entry_id"):
        assert response.last_entry_id == -1, response


def assert_served(op: str, response) -> None:
    assert response.status == pb.OK, response
    if op == "range_read":
        assert [(e.entry_id, e.body) for e in response.entries] == [(e, entry(LEDGER, e)) for e in range(ENTRIES)]
    elif op in ("read", "recovery_read", "fencing_read"):
        assert [(e.entry_id, e.body) for e in response.entries] == [(0, entry(LEDGER, 0))]
        assert response.fenced is (op == "fencing_read")
    elif op == "write_lac":
        assert response.last_add_confirmed == ENTRIES - 1
    else:
        assert response.last_add_confirmed == ENTRIES - 2


def scrape(url: str, ca_file: str | None = None) -> dict[str, float]:
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def unauthorized(samples: dict[str, float], op: str) -> float:
    return samples.get(f'bookie_unauthorized_total{{op="{op}"}}', 0.0)


# --- plaintext: the key is the only authority -------------------------------------------------------------
@pytest.mark.parametrize("op", list(OPS))
def test_every_operation_needs_the_ledger_key(op, bookie, raw_stub):
    stub = raw_stub(bookie)
    write_ledger(stub)
    before = unauthorized(scrape(bookie.metrics_url), OPS[op])
    started = time.monotonic()
    assert_refused(call(stub, op, b""), "needs its master key")
    assert_refused(call(stub, op, WRONG_KEY), f"master key does not match ledger {LEDGER}")
    assert time.monotonic() - started < LONG_POLL_MS / 2000  # a refused long poll does not wait either
    assert unauthorized(scrape(bookie.metrics_url), OPS[op]) == before + 2
    lac = call(stub, "read_lac", KEY)
    assert (lac.last_add_confirmed, lac.fenced) == (ENTRIES - 2, False)  # neither refusal changed the ledger
    if op == "long_poll":  # served: it waits for a LAC above previous_lac, which the writer then sends
        response = stub.ReadLac.future(pb.ReadLacRequest(ledger_id=LEDGER, master_key=KEY, has_previous=True,
                                                         previous_lac=ENTRIES - 2, timeout_ms=LONG_POLL_MS),
                                       timeout=30)
        add_batch(stub, [pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES, master_key=KEY,
                                       body=entry(LEDGER, ENTRIES))])
        assert response.result().status == pb.OK and response.result().last_add_confirmed == ENTRIES - 1
    else:
        assert_served(op, call(stub, op, KEY))


def test_adds_need_the_ledger_key(bookie, raw_stub):
    stub = raw_stub(bookie)
    write_ledger(stub)
    before = unauthorized(scrape(bookie.metrics_url), "add")
    results = add_batch(stub, [
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES, body=entry(LEDGER, ENTRIES)),
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES + 1, master_key=WRONG_KEY, body=entry(LEDGER, ENTRIES + 1)),
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES + 2, body=entry(LEDGER, ENTRIES + 2), recovery=True),
        pb.AddRequest(ledger_id=77, entry_id=0, body=entry(77, 0)),  # a new ledger without a key
    ])
    assert results[(LEDGER, ENTRIES)].status == pb.UNAUTHORIZED
    assert f"an add to ledger {LEDGER} needs its master key" in results[(LEDGER, ENTRIES)].message
    assert results[(LEDGER, ENTRIES + 1)].status == pb.UNAUTHORIZED
    assert "master key does not match" in results[(LEDGER, ENTRIES + 1)].message
    assert results[(LEDGER, ENTRIES + 2)].status == pb.UNAUTHORIZED  # recovery needs it too (not an admin)
    assert results[(77, 0)].status == pb.UNAUTHORIZED
    assert unauthorized(scrape(bookie.metrics_url), "add") == before + 4
    for entry_id in (ENTRIES, ENTRIES + 1, ENTRIES + 2):
        reply = stub.Read(pb.ReadRequest(ledger_id=LEDGER, first_entry_id=entry_id, last_entry_id=entry_id,
                                         master_key=KEY), timeout=30)
        assert reply.status == pb.NO_SUCH_ENTRY, reply
    assert call(stub, "read", KEY, ledger_id=77).status == pb.NO_SUCH_LEDGER  # no state was created


def test_unknown_ledgers_answer_no_such_ledger_and_reveal_nothing(bookie, raw_stub):
    stub = raw_stub(bookie)
    for key in (KEY, WRONG_KEY):
        for op in ("read", "range_read", "read_lac"):
            reply = call(stub, op, key, ledger_id=999)
            assert reply.status == pb.NO_SUCH_LEDGER and reply.last_add_confirmed == -1, (op, reply)
        assert call(stub, "write_lac", key, ledger_id=999).status == pb.NO_SUCH_LEDGER
        assert_refused(call(stub, "read", b"", ledger_id=999), "needs its master key")


# --- mutual TLS: administrator identities -------------------------------------------------------------------
@pytest.fixture
def pki(tmp_path):
    """A CA made for this test, the bookie's certificate, and client certificates: an admin, a writer."""
    directory = tmp_path / "pki"
    directory.mkdir(mode=0o700)
    ca = CertificateAuthority.create()
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    files = {"ca": str(directory / "ca.pem")}
    for name, hosts in (("bookie", ["127.0.0.1", "localhost"]), (ADMIN, []), ("writer", [])):
        ca.issue(name, hosts).write(directory / f"{name}.pem", directory / f"{name}-key.pem")
        files[name] = (str(directory / f"{name}.pem"), str(directory / f"{name}-key.pem"))
    return files


@pytest.fixture
def mtls_bookie(make_bookie, pki):
    cert, key = pki["bookie"]
    return make_bookie("tls-bookie", checkpoint_interval=0, tls_cert=cert, tls_key=key, tls_client_ca=pki["ca"],
                       admin_identity=[ADMIN, "another-admin"], add_port=0).start()


@pytest.fixture
def stub_as(pki, mtls_bookie):
    channels = []

    def factory(name: str):
        cert, key = pki[name]
        channel = grpc.secure_channel(mtls_bookie.address, ClientTls(pki["ca"], cert, key).channel_credentials())
        channels.append(channel)
        return pb_grpc.BookieStub(channel)

    try:
        yield factory
    finally:
        for channel in channels:
            channel.close()


def test_an_admin_identity_reads_lac_reads_and_fences_without_the_key(mtls_bookie, stub_as, pki):
    writer, admin = stub_as("writer"), stub_as(ADMIN)
    write_ledger(writer)
    url = mtls_bookie.metrics_url
    assert url.startswith("https://")  # /metrics over TLS with the bookie's certificate
    for op in ("read", "range_read", "read_lac", "recovery_read"):
        assert_served(op, call(admin, op, b""))
    poll = admin.ReadLac(pb.ReadLacRequest(ledger_id=LEDGER, has_previous=True, previous_lac=ENTRIES - 3,
                                           timeout_ms=LONG_POLL_MS), timeout=30)
    assert poll.status == pb.OK and poll.last_add_confirmed == ENTRIES - 2
    assert_served("write_lac", call(admin, "write_lac", b""))
    # a key an admin does send must match; a non-admin certificate is no authority
    assert_refused(call(admin, "read", WRONG_KEY), "does not match")
    for op in OPS:
        assert_refused(call(writer, op, b""), "needs its master key")
    assert_served("fencing_read", call(admin, "fencing_read", b""))
    # no state without the key, even for an admin: a fence of a ledger this bookie does not store is refused
    assert_refused(call(admin, "fencing_read", b"", ledger_id=500), "without its master key")
    assert call(admin, "read_lac", b"", ledger_id=500).status == pb.NO_SUCH_LEDGER
    samples = scrape(url, pki["ca"])
    assert samples['bookie_admin_requests_total{op="read"}'] == 3
    assert samples['bookie_admin_requests_total{op="read_lac"}'] == 2
    assert samples['bookie_admin_requests_total{op="write_lac"}'] == 1
    assert samples['bookie_admin_requests_total{op="fence"}'] == 1
    assert unauthorized(samples, "fence") == 2  # the writer's and the admin's of an unknown ledger


def test_an_admin_adds_only_recovery_write_backs_of_stored_ledgers_without_the_key(stub_as):
    writer, admin = stub_as("writer"), stub_as(ADMIN)
    write_ledger(writer)
    assert call(writer, "fencing_read", KEY).fenced
    results = add_batch(admin, [
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES, body=entry(LEDGER, ENTRIES)),
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES + 1, body=entry(LEDGER, ENTRIES + 1), recovery=True),
        pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES + 2, master_key=WRONG_KEY, body=entry(LEDGER, ENTRIES + 2),
                      recovery=True),
        pb.AddRequest(ledger_id=600, entry_id=0, body=entry(600, 0), recovery=True),
    ])
    assert results[(LEDGER, ENTRIES)].status == pb.UNAUTHORIZED  # a plain add always needs the key
    assert results[(LEDGER, ENTRIES + 1)].status == pb.OK, results[(LEDGER, ENTRIES + 1)]
    assert results[(LEDGER, ENTRIES + 2)].status == pb.UNAUTHORIZED
    assert results[(600, 0)].status == pb.UNAUTHORIZED  # not stored here: no state without the key
    written = writer.Read(pb.ReadRequest(ledger_id=LEDGER, first_entry_id=ENTRIES + 1, last_entry_id=ENTRIES + 1,
                                         master_key=KEY), timeout=30)
    assert [(e.entry_id, e.body) for e in written.entries] == [(ENTRIES + 1, entry(LEDGER, ENTRIES + 1))]
    assert call(admin, "read_lac", b"", ledger_id=600).status == pb.NO_SUCH_LEDGER


@contextlib.contextmanager
def framed_tls(bookie, pki, name: str):
    """A mutual-TLS connection to the bookie's framed port as ``name``, and its next frame (a function)."""
    with open_metadata_store(bookie.metadata_uri) as store:
        port = store.bookies()[bookie.bookie_id].info["add_port"]
    cert, key = pki[name]
    context = ClientTls(pki["ca"], cert, key).ssl_context()
    reader, pending = frames.FrameReader(1 << 24), []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        def next_frame():
            while not pending:
                data = conn.recv(65536)
                assert data, "the bookie closed the framed connection without an END"
                pending.extend(reader.feed(data))
            return pending.pop(0)
        yield conn, next_frame


def framed_add_batch(bookie, pki, name: str, adds: list[pb.AddRequest]) -> dict[tuple[int, int], pb.AddResult]:
    """``add_batch`` over the bookie's framed add port (docs/protocol.md W11), under mutual TLS as ``name``."""
    results = {}
    with framed_tls(bookie, pki, name) as (conn, next_frame):
        conn.sendall(frames.hello(frames.VERSION, 0))
        assert next_frame()[0] is Kind.WELCOME
        conn.sendall(frames.frame(Kind.ADDS, pb.AddBatch(adds=adds).SerializeToString()) + frames.end(pb.OK))
        while (frame := next_frame())[0] is Kind.ANSWERS:
            for result in pb.AddResultBatch.FromString(frame[1]).results:
                results[(result.ledger_id, result.entry_id)] = result
    assert frames.parse_end(frame[1])[0] == pb.OK
    return results


def test_an_admin_identity_is_the_same_on_the_framed_add_port(mtls_bookie, stub_as, pki):
    """docs/protocol.md W11, K2: over the framed port's TLS the admin's certificate lets its recovery write-back
    of a stored ledger in without the key, and nothing more; another certificate is no authority."""
    writer = stub_as("writer")
    write_ledger(writer)
    assert call(writer, "fencing_read", KEY).fenced
    write_back = [pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES, body=entry(LEDGER, ENTRIES), recovery=True),
                  pb.AddRequest(ledger_id=LEDGER, entry_id=ENTRIES + 1, body=entry(LEDGER, ENTRIES + 1)),
                  pb.AddRequest(ledger_id=600, entry_id=0, body=entry(600, 0), recovery=True)]
    as_writer = framed_add_batch(mtls_bookie, pki, "writer", write_back)
    assert {key: result.status for key, result in as_writer.items()} == {
        (LEDGER, ENTRIES): pb.UNAUTHORIZED, (LEDGER, ENTRIES + 1): pb.UNAUTHORIZED, (600, 0): pb.UNAUTHORIZED}
    as_admin = framed_add_batch(mtls_bookie, pki, ADMIN, write_back)
    assert {key: result.status for key, result in as_admin.items()} == {
        (LEDGER, ENTRIES): pb.OK, (LEDGER, ENTRIES + 1): pb.UNAUTHORIZED, (600, 0): pb.UNAUTHORIZED}
    written = writer.Read(pb.ReadRequest(ledger_id=LEDGER, first_entry_id=ENTRIES, last_entry_id=ENTRIES,
                                         master_key=KEY), timeout=30)
    assert [(e.entry_id, e.body) for e in written.entries] == [(ENTRIES, entry(LEDGER, ENTRIES))]


def test_admin_identities_need_mutual_tls(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--data-dir", "/tmp/x", "--port", "3181", "--metadata", "sqlite:///x.db",
                    "--admin-identity", ADMIN])
    assert "--admin-identity: needs --tls-client-ca" in capsys.readouterr().err
    config = parse_args(["--data-dir", "/tmp/x", "--port", "3181", "--metadata", "sqlite:///x.db",
                         "--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca",
                         "--admin-identity", ADMIN, "--admin-identity", "b", "--admin-identity", ADMIN])
    assert config.admin_identities == (ADMIN, "b")


# --- data directories -----------------------------------------------------------------------------------------
def test_data_and_journal_dirs_are_private_and_an_open_one_is_named(make_bookie, tmp_path):
    journal = tmp_path / "deep" / "journal"
    bookie = make_bookie("private", journal_dir=journal, checkpoint_interval=0).start()
    bookie.stop()
    for directory in (bookie.data_dir, journal):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o755)
    exposed = make_bookie("open", checkpoint_interval=0)
    exposed.data_dir = open_dir
    exposed.start()
    exposed.stop()
    assert stat.S_IMODE(os.stat(open_dir).st_mode) == 0o755  # never changed behind the operator's back
    assert f"run: chmod 700 {open_dir}" in (open_dir / "bookie-stderr.log").read_text()


def framed_reads(bookie, pki, name: str, requests: list[pb.ReadRequest]) -> list[pb.ReadResponse]:
    """Each request's answer on a read connection of the bookie's framed port (docs/protocol.md W12), under mutual
    TLS as ``name``."""
    answers = []
    with framed_tls(bookie, pki, name) as (conn, next_frame):
        conn.sendall(frames.hello(frames.VERSION, frames.READS))
        kind, payload = next_frame()
        assert kind is Kind.WELCOME and frames.parse_welcome(payload, frames.READS)[1] == frames.READS
        conn.sendall(b"".join(frames.read_frame(index, request.SerializeToString())
                              for index, request in enumerate(requests)) + frames.end(pb.OK))
        for index in range(len(requests)):
            kind, payload = next_frame()
            request_id, message = frames.split_request_id(payload)
            assert kind is Kind.READ_ANSWER and request_id == index
            answers.append(pb.ReadResponse.FromString(message))
        assert frames.parse_end(next_frame()[1])[0] == pb.OK
    return answers


def test_an_admin_identity_is_the_same_on_the_framed_port_s_reads(mtls_bookie, stub_as, pki):
    """docs/protocol.md W12, K2: over the framed port's TLS the admin's certificate reads a stored ledger without
    its key, and a key it sends must still match; another certificate is no authority."""
    write_ledger(stub_as("writer"))
    without_key = pb.ReadRequest(ledger_id=LEDGER, first_entry_id=0, last_entry_id=ENTRIES - 1)
    wrong_key = pb.ReadRequest(ledger_id=LEDGER, first_entry_id=0, last_entry_id=0, master_key=WRONG_KEY)
    with_key = pb.ReadRequest(ledger_id=LEDGER, first_entry_id=0, last_entry_id=ENTRIES - 1, master_key=KEY)
    admin_read, admin_wrong, admin_keyed = framed_reads(mtls_bookie, pki, ADMIN, [without_key, wrong_key, with_key])
    assert admin_read.status == pb.OK and [e.entry_id for e in admin_read.entries] == list(range(ENTRIES))
    assert [(e.entry_id, e.body) for e in admin_read.entries] == [(e.entry_id, e.body) for e in admin_keyed.entries]
    assert admin_wrong.status == pb.UNAUTHORIZED and "does not match" in admin_wrong.message
    writer_read, writer_keyed = framed_reads(mtls_bookie, pki, "writer", [without_key, with_key])
    assert writer_read.status == pb.UNAUTHORIZED and "needs its master key" in writer_read.message
    assert writer_keyed.status == pb.OK and len(writer_keyed.entries) == ENTRIES
