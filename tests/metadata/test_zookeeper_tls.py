"""The ZooKeeper store over TLS: a real ZooKeeper with a secureClientPort, certificates made here."""
from __future__ import annotations

import time
import uuid

import pytest
import trustme

from pyspark_ledger.errors import InvalidStateError, MetadataError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.zk_security import AUTH_ENV
from pyspark_ledger.testing.zookeeper import ZooKeeperServer, ZooKeeperTls
from tests.metadata.helpers import ledger

pytestmark = [pytest.mark.zookeeper,
              pytest.mark.skipif(not ZooKeeperServer.is_available(tls=True),
                                 reason=f"needs ZooKeeper: {ZooKeeperServer.unavailable_reason(tls=True)}")]
BOUND_S = 15.0  # a refused connection must be reported within this long (session_timeout=1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("zk-pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("ledger-client")
    files = {"ca": directory / "ca.pem", "server_cert": directory / "server.pem",
             "server_key": directory / "server.key", "client_cert": directory / "client.pem",
             "client_key": directory / "client.key", "other_ca": directory / "other-ca.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for blob, name in ((b"".join(pem.bytes() for pem in server.cert_chain_pems), "server_cert"),
                       (server.private_key_pem.bytes(), "server_key"),
                       (b"".join(pem.bytes() for pem in client.cert_chain_pems), "client_cert"),
                       (client.private_key_pem.bytes(), "client_key"),
                       (trustme.CA().cert_pem.bytes(), "other_ca")):
        files[name].write_bytes(blob)
    return files


@pytest.fixture(scope="module")
def tls_zookeeper(pki):
    with ZooKeeperServer(tls=ZooKeeperTls(pki["server_cert"], pki["server_key"], pki["ca"])) as server:
        yield server


@pytest.fixture
def chroot():
    return f"/tls-{uuid.uuid4().hex[:10]}"


def test_the_store_works_over_the_secure_port(tls_zookeeper, chroot):
    uri = tls_zookeeper.secure_uri(chroot, session_timeout=2)
    assert "tls=1" in uri and f":{tls_zookeeper.secure_port}/" in uri
    store = open_metadata_store(uri, create=True)
    try:
        ledger_id = store.new_ledger_id()
        store.create_ledger(ledger(ledger_id))
        assert store.read_ledger(ledger_id).value.ledger_id == ledger_id
        store.register_bookie("bookie-tls:3181")
        assert set(store.bookies()) == {"bookie-tls:3181"}
    finally:
        store.close()


def test_tls_and_digest_acls_together(tls_zookeeper, chroot, monkeypatch):
    monkeypatch.setenv(AUTH_ENV, "tls-user:tls-pw")
    store = open_metadata_store(tls_zookeeper.secure_uri(chroot, session_timeout=2), create=True)
    try:
        store.create("streams/s", b"v")
    finally:
        store.close()
    monkeypatch.delenv(AUTH_ENV)
    with pytest.raises(MetadataError, match="digest ACLs"):
        open_metadata_store(tls_zookeeper.secure_uri(chroot, session_timeout=2), create=True)


def test_a_plaintext_store_on_the_secure_port_fails_in_bounded_time_saying_tls(tls_zookeeper, chroot):
    uri = f"zk://127.0.0.1:{tls_zookeeper.secure_port}{chroot}?session_timeout=1"
    started = time.monotonic()
    with pytest.raises(MetadataError) as caught:
        open_metadata_store(uri, create=True)
    assert time.monotonic() - started < BOUND_S
    message = str(caught.value)
    assert "\n" not in message and "cannot connect" in message and "tls=1" in message


def test_a_server_certificate_from_another_ca_is_refused(tls_zookeeper, pki, chroot):
    uri = tls_zookeeper.secure_uri(chroot, session_timeout=1, tls_ca=str(pki["other_ca"]))
    started = time.monotonic()
    with pytest.raises(MetadataError, match="tls_ca"):
        open_metadata_store(uri, create=True)
    assert time.monotonic() - started < BOUND_S


def test_tls_to_the_plaintext_port_fails_in_bounded_time(tls_zookeeper, pki, chroot):
    uri = tls_zookeeper.uri(chroot, session_timeout=1, tls=1, tls_ca=str(pki["ca"]))
    started = time.monotonic()
    with pytest.raises(MetadataError, match="secureClientPort"):
        open_metadata_store(uri, create=True)
    assert time.monotonic() - started < BOUND_S


def test_a_server_requiring_client_certificates_takes_tls_cert_and_key(pki, tmp_path):
    tls = ZooKeeperTls(pki["server_cert"], pki["server_key"], pki["ca"], client_auth="need")
    with ZooKeeperServer(tmp_path / "zk", tls=tls) as server:
        with pytest.raises(MetadataError, match="cannot connect"):
            open_metadata_store(server.secure_uri("/mtls", session_timeout=1), create=True)
        store = open_metadata_store(server.secure_uri("/mtls", session_timeout=2,
                                                      tls_cert=str(pki["client_cert"]),
                                                      tls_key=str(pki["client_key"])), create=True)
        try:
            store.create("k", b"v")
            assert store.get("k").value == b"v"
        finally:
            store.close()


def test_the_default_fixture_has_no_tls_port(zookeeper_server):
    with pytest.raises(InvalidStateError, match="no TLS port"):
        zookeeper_server.secure_port
