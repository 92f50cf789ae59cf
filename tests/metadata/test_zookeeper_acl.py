"""ZooKeeper digest ACLs on every znode the store creates (real ZooKeeper, real kazoo clients).

With credentials (LEDGER_ZK_AUTH or auth_file=) a client without them, or with
wrong ones, can neither read nor change the project's znodes; the store with
them works end to end, also from a real bookie process; without credentials
nothing changes (world-open znodes, as before).
"""
from __future__ import annotations

import logging
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.errors import BookieProcessError, MetadataUnauthorizedError, UnauthorizedError
from pyspark_ledger.metadata import layout, open_metadata_store
from pyspark_ledger.metadata.zk_security import AUTH_ENV
from pyspark_ledger.testing.bookies import BookieCluster, BookieProcess
from tests.metadata.helpers import ledger

pytestmark = pytest.mark.zookeeper

USER, PASSWORD = "ledger-admin", "s3cret-pw"
DIGEST_ACL = [make_digest_acl(USER, PASSWORD, all=True)]


@pytest.fixture
def chroot():
    return f"/acl-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kazoo(zookeeper_server):
    """``kazoo(auth=None)``: a started plain kazoo client on the server's root; stopped at teardown."""
    clients = []

    def make(auth: str | None = None) -> KazooClient:
        client = KazooClient(hosts=zookeeper_server.connect_string, timeout=5,
                             auth_data=[("digest", auth)] if auth else None)
        client.start(timeout=10)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def protected(zookeeper_server, chroot, monkeypatch):
    """A store with credentials, holding a ledger, an id, a bookie registration and a stream key."""
    monkeypatch.setenv(AUTH_ENV, f"{USER}:{PASSWORD}")
    store = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    monkeypatch.delenv(AUTH_ENV)
    ledger_id = store.new_ledger_id()
    store.create_ledger(ledger(ledger_id))
    store.register_bookie("bookie-1:3181", {"host": "127.0.0.1"})
    store.create("streams/orders", b"{}")
    yield store, ledger_id
    store.close()


def project_znodes(chroot: str, ledger_id: int) -> list[str]:
    ledger_path = layout.ledger_path(ledger_id)
    parents = [ledger_path.rsplit("/", depth)[0] for depth in range(1, 5)]
    return [chroot, *(f"{chroot}{root}" for root in layout.ROOTS), f"{chroot}{ledger_path}",
            *(f"{chroot}{parent}" for parent in parents), f"{chroot}{layout.BOOKIES}",
            f"{chroot}{layout.bookie_path('bookie-1:3181', False)}",
            f"{chroot}{layout.key_path('streams')}", f"{chroot}{layout.key_path('streams/orders')}",
            f"{chroot}{layout.idgen_bucket(0)}"]


def test_every_znode_the_store_creates_is_for_the_digest_only(protected, chroot, kazoo):
    _store, ledger_id = protected
    admin = kazoo(f"{USER}:{PASSWORD}")
    for path in project_znodes(chroot, ledger_id):
        acl, _stat = admin.get_acls(path)
        assert acl == DIGEST_ACL, path
    bookie = admin.exists(f"{chroot}{layout.bookie_path('bookie-1:3181', False)}")
    assert bookie.ephemeralOwner != 0  # the registration is still ephemeral


@pytest.mark.parametrize("auth", [None, f"{USER}:wrong-password", f"intruder:{PASSWORD}"],
                         ids=["no-digest", "wrong-password", "wrong-user"])
def test_a_client_without_the_digest_can_neither_read_nor_change(protected, chroot, kazoo, auth):
    _store, ledger_id = protected
    intruder = kazoo(auth)
    ledger_node = f"{chroot}{layout.ledger_path(ledger_id)}"
    bookie_node = f"{chroot}{layout.bookie_path('bookie-1:3181', False)}"
    key_node = f"{chroot}{layout.key_path('streams/orders')}"
    for path in (ledger_node, bookie_node, key_node, f"{chroot}{layout.IDGEN}"):
        with pytest.raises(NoAuthError):
            intruder.get(path)
        with pytest.raises(NoAuthError):
            intruder.set(path, b"tampered")
        with pytest.raises(NoAuthError):
            intruder.delete(path)
    for path in (chroot, f"{chroot}{layout.LEDGERS}", f"{chroot}{layout.BOOKIES_AVAILABLE}",
                 f"{chroot}{layout.KV}", f"{chroot}{layout.key_path('streams')}"):
        with pytest.raises(NoAuthError):
            intruder.get_children(path)
        with pytest.raises(NoAuthError):
            intruder.create(f"{path}/planted", b"x")
    with pytest.raises(NoAuthError):
        intruder.set_acls(ledger_node, OPEN_ACL_UNSAFE)
    admin = kazoo(f"{USER}:{PASSWORD}")
    assert admin.get(key_node)[0] == b"{}" and admin.exists(bookie_node)


def test_the_store_with_the_credentials_works_end_to_end(protected, zookeeper_server, chroot,
                                                         monkeypatch):
    store, ledger_id = protected
    stored = store.read_ledger(ledger_id)
    changed = stored.value.with_changes(custom_metadata={"owner": b"acl-test"})
    assert store.write_ledger(changed, stored.version) == stored.version + 1
    assert list(store.list_ledgers()) == [ledger_id]
    assert set(store.bookies()) == {"bookie-1:3181"}
    assert store.children("streams") == ["orders"]
    monkeypatch.setenv(AUTH_ENV, f"{USER}:{PASSWORD}")
    other = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    try:
        assert other.read_ledger(ledger_id).value.custom_metadata == {"owner": b"acl-test"}
        assert other.new_ledger_id() != ledger_id
        assert other.get("streams/orders").value == b"{}"
    finally:
        other.close()


@pytest.mark.parametrize("auth", [None, f"{USER}:wrong-password"], ids=["no-credentials", "wrong"])
def test_a_store_without_the_right_credentials_fails_at_open_in_one_line(protected, zookeeper_server,
                                                                         chroot, monkeypatch, auth):
    if auth:
        monkeypatch.setenv(AUTH_ENV, auth)
    with pytest.raises(MetadataUnauthorizedError) as caught:
        open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    message = str(caught.value)
    assert "\n" not in message
    assert "protected by digest ACLs" in message and AUTH_ENV in message
    assert ("no credentials were given" in message) if auth is None else (repr(USER) in message)
    assert "wrong-password" not in message
    assert isinstance(caught.value, UnauthorizedError)


def test_the_credentials_may_come_from_a_private_file(protected, zookeeper_server, chroot, tmp_path):
    _store, ledger_id = protected
    auth = tmp_path / "zk.auth"
    auth.write_text(f"{USER}:{PASSWORD}\n")
    auth.chmod(0o600)
    store = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2, auth_file=str(auth)), create=True)
    try:
        assert store.read_ledger(ledger_id).value.ledger_id == ledger_id
    finally:
        store.close()


def test_without_credentials_the_store_creates_open_znodes_as_before(zookeeper_server, chroot, kazoo,
                                                                     monkeypatch):
    monkeypatch.delenv(AUTH_ENV, raising=False)
    store = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    try:
        ledger_id = store.new_ledger_id()
        store.create_ledger(ledger(ledger_id))
        store.create("streams/open", b"1")
        anyone = kazoo()
        for path in (chroot, f"{chroot}{layout.ledger_path(ledger_id)}",
                     f"{chroot}{layout.key_path('streams/open')}"):
            assert anyone.get_acls(path)[0] == OPEN_ACL_UNSAFE, path
        assert anyone.get(f"{chroot}{layout.key_path('streams/open')}")[0] == b"1"
    finally:
        store.close()


def test_credentials_on_an_open_tree_warn_and_protect_new_znodes(zookeeper_server, chroot, kazoo,
                                                                 monkeypatch, caplog):
    monkeypatch.delenv(AUTH_ENV, raising=False)
    open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True).close()
    monkeypatch.setenv(AUTH_ENV, f"{USER}:{PASSWORD}")
    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.metadata.zk_session"):
        store = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    try:
        assert "created without ACLs" in caplog.text and PASSWORD not in caplog.text
        store.create("streams/new", b"x")
        admin = kazoo(f"{USER}:{PASSWORD}")
        assert admin.get_acls(f"{chroot}{layout.key_path('streams/new')}")[0] == DIGEST_ACL
    finally:
        store.close()


def test_a_bookie_process_with_the_credentials_registers_and_serves_a_writer(zookeeper_server, chroot,
                                                                             tmp_path, kazoo, monkeypatch):
    uri = zookeeper_server.uri(chroot, session_timeout=2)
    auth = f"{USER}:{PASSWORD}"
    with BookieCluster(1, tmp_path / "bookies", uri, env={AUTH_ENV: auth}) as cluster:
        bookie_id = cluster[0].bookie_id
        monkeypatch.setenv(AUTH_ENV, auth)
        client = LedgerClient(uri)
        try:
            assert client.bookies() == [bookie_id]
            writer = client.create_ledger(ensemble_size=1, password=b"pw")
            assert [writer.append(b"entry-%d" % i) for i in range(3)] == [0, 1, 2]
            writer.close()
            reader = client.open_ledger(writer.ledger_id, password=b"pw")
            assert [entry.data for entry in reader.read()] == [b"entry-0", b"entry-1", b"entry-2"]
            reader.close()
        finally:
            client.close()
        anyone = kazoo()
        with pytest.raises(NoAuthError):
            anyone.get(f"{chroot}{layout.bookie_path(bookie_id, False)}")
        with pytest.raises(NoAuthError):
            anyone.get(f"{chroot}{layout.ledger_path(writer.ledger_id)}")


def test_a_bookie_without_the_credentials_stops_with_one_clear_line(protected, zookeeper_server, chroot,
                                                                   tmp_path, monkeypatch):
    monkeypatch.delenv(AUTH_ENV, raising=False)
    bookie = BookieProcess(tmp_path / "bookie", zookeeper_server.uri(chroot, session_timeout=2))
    try:
        with pytest.raises(BookieProcessError, match="exited with status 1"):
            bookie.start()
    finally:
        bookie.kill()
    stderr = (bookie.data_dir / "bookie-stderr.log").read_text()
    lines = [line for line in stderr.splitlines() if line.startswith("bookie-server:")]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    assert "protected by digest ACLs" in lines[0] and AUTH_ENV in lines[0]
