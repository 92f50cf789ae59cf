"""ZooKeeper backend specifics: layout, id generation, session loss, outages."""
from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

from pyspark_ledger.errors import MetadataError, NoSuchMetadataStoreError
from pyspark_ledger.metadata import open_metadata_store, parse_metadata_uri
from pyspark_ledger.metadata.layout import ledger_path
from pyspark_ledger.metadata.zookeeper import ZooKeeperMetadataStore
from pyspark_ledger.testing.zookeeper import ZooKeeperServer, free_port
from tests.metadata.helpers import Recorder, ledger, wait_until

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def chroot():
    return f"/zk-specific-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def raw(zookeeper_server, chroot):
    """A plain kazoo client on the test's chroot, to look at znodes directly."""
    client = KazooClient(hosts=zookeeper_server.connect_string, timeout=5)
    client.start(timeout=10)
    client.ensure_path(chroot)
    client.chroot = chroot
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_store(zookeeper_server, chroot):
    store = open_metadata_store(zookeeper_server.uri(chroot, session_timeout=2), create=True)
    yield store
    store.close()


def test_ledger_paths_follow_the_documented_layout():
    assert ledger_path(42) == "/ledgers/000/0000/0000/0000/L0042"
    assert ledger_path(123_456_789_012) == "/ledgers/000/0000/1234/5678/L9012"
    assert ledger_path(2**63 - 1) == "/ledgers/922/3372/0368/5477/L5807"


def test_ledgers_land_in_their_hierarchical_znodes(zk_store, raw):
    zk_store.create_ledger(ledger(123_456_789_012))
    data, stat = raw.get("/ledgers/000/0000/1234/5678/L9012")
    assert stat.version == 0
    assert data == ledger(123_456_789_012).to_json()


def test_a_nested_chroot_is_created(zookeeper_server):
    nested = f"/deep-{uuid.uuid4().hex[:8]}/a/b"
    with open_metadata_store(zookeeper_server.uri(nested), create=True) as store:
        store.create("k", b"v")
    client = KazooClient(hosts=zookeeper_server.connect_string, timeout=5)
    client.start(timeout=10)
    try:
        assert client.get(f"{nested}/kv/k")[0] == b"v"
    finally:
        client.stop()
        client.close()


def test_stray_znodes_under_ledgers_are_ignored(zk_store, raw):
    zk_store.create_ledger(ledger(7))
    raw.create("/ledgers/junk", b"")
    raw.create("/ledgers/000/0000/0000/0000/not-a-ledger", b"")
    assert list(zk_store.list_ledgers()) == [7]


def test_ids_stay_unique_when_the_sequence_rolls_to_a_new_bucket(zookeeper_server, chroot, raw):
    target = parse_metadata_uri(zookeeper_server.uri(chroot))
    stores = [ZooKeeperMetadataStore(target, id_roll_at=4, create=True) for _ in range(2)]
    try:
        ids = [stores[i % 2].new_ledger_id() for i in range(24)]
    finally:
        for store in stores:
            store.close()
    assert len(set(ids)) == len(ids)
    high = int(raw.get("/idgen")[0])
    assert high >= 2
    buckets = {i >> 31 for i in ids}  # the last bump may happen after the last id was taken
    assert set(range(high)) <= buckets <= set(range(high + 1))


def _expire_session(server: ZooKeeperServer, store: ZooKeeperMetadataStore) -> int:
    """End the store's session from outside, as a long partition would; returns its id."""
    session_id, password = store._session.client.client_id
    thief = KazooClient(hosts=server.connect_string, client_id=(session_id, password), timeout=2)
    thief.start(timeout=10)
    thief.stop()
    thief.close()
    return session_id


def test_registration_and_watches_come_back_after_session_expiry(zookeeper_server, zk_store, raw):
    zk_store.register_bookie("b1", {"n": 1})
    zk_store.create_ledger(ledger(5))
    recorder = Recorder()
    zk_store.watch_ledger(5, recorder)
    old_session = _expire_session(zookeeper_server, zk_store)

    def owner():
        stat = raw.exists("/bookies/available/b1")
        return stat.ephemeralOwner if stat else None

    wait_until(lambda: owner() not in (None, old_session), what="b1 re-created by a new session")
    assert zk_store.bookies()["b1"].info == {"n": 1}
    raw.set(ledger_path(5), ledger(5, state="CLOSED").to_json(), version=0)
    seen = recorder.wait_for(lambda e: e is not None and e.version == 1, "the watch after expiry")
    assert seen.value.state == "CLOSED"


def test_outage_gives_a_clear_error_and_the_store_recovers(tmp_path):
    if not ZooKeeperServer.is_available():
        pytest.skip(f"needs ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
    with ZooKeeperServer(tmp_path / "zk") as server:
        uri = server.uri("/outage", session_timeout=2)
        with open_metadata_store(uri, create=True) as store:
            store.create("k", b"v")
            store.register_bookie("b1")
            server.stop()
            with pytest.raises(MetadataError, match="zk://127.0.0.1"):
                store.get("k")
            server.start()
            wait_until(lambda: _readable(store, "k"), timeout=30, what="the store to reconnect")
            wait_until(lambda: "b1" in store.bookies(), timeout=30, what="b1 to be registered")


def _readable(store, key):
    try:
        return store.get(key).value == b"v"
    except MetadataError:
        return False


def test_unreachable_zookeeper_is_reported_with_the_uri():
    uri = f"zk://127.0.0.1:{free_port()}/x?session_timeout=1"
    with pytest.raises(MetadataError, match="cannot connect to ZooKeeper") as caught:
        open_metadata_store(uri, create=True)
    assert uri in str(caught.value)


def test_opening_a_missing_chroot_without_create_names_it_and_creates_nothing(zookeeper_server, chroot):
    uri = zookeeper_server.uri(chroot, session_timeout=2)
    with pytest.raises(NoSuchMetadataStoreError, match=f"ZooKeeper has no {chroot}/ledgers"):
        open_metadata_store(uri)
    client = KazooClient(hosts=zookeeper_server.connect_string, timeout=5)
    client.start(timeout=10)
    try:
        assert client.exists(chroot) is None, "the read created the chroot"
    finally:
        client.stop()
        client.close()
    open_metadata_store(uri, create=True).close()
    open_metadata_store(uri).close()  # once created, a plain open finds it


def _registration(store: ZooKeeperMetadataStore, bookie_id: str):
    return store.register_bookie(bookie_id, {"n": 1})


def _applied_but_reported_failed(registration, monkeypatch) -> None:
    """A switch to read-only that reaches ZooKeeper while its caller sees a failure (it timed out while
    ZooKeeper was away, and the queued request was applied when the session came back)."""
    session = registration._session

    def fail_after_commit(what, results, **outcomes):
        raise MetadataError(f"{what}: timed out (the request may still be applied)")

    monkeypatch.setattr(session, "check_transaction", fail_after_commit)
    with pytest.raises(MetadataError, match="timed out"):
        registration.set_read_only(True)
    monkeypatch.undo()


def _listed(raw, bookie_id: str) -> list[str]:
    return [directory for directory in ("available", "readonly") if raw.exists(f"/bookies/{directory}/{bookie_id}")]


def test_a_switch_applied_though_it_failed_is_settled_by_the_next_switch(zk_store, raw, monkeypatch):
    """Found by the fault suite (ZooKeeper seeds 9 and 20): the disk fills while ZooKeeper is away, the
    switch to read-only times out but is applied, the disk is freed; the bookie must end writable and
    listed once, not stuck under readonly."""
    registration = _registration(zk_store, "b9")
    _applied_but_reported_failed(registration, monkeypatch)
    assert _listed(raw, "b9") == ["readonly"]          # the store took the switch the bookie thinks failed
    registration.set_read_only(False)                   # the disk was freed: the bookie is writable
    assert _listed(raw, "b9") == ["available"]
    assert zk_store.bookies()["b9"].read_only is False


def test_a_reconnect_after_a_switch_of_unknown_outcome_leaves_one_node(zk_store, raw, monkeypatch):
    registration = _registration(zk_store, "b20")
    _applied_but_reported_failed(registration, monkeypatch)
    registration._restore()                             # the reconnect hook, as after a session loss
    assert _listed(raw, "b20") == ["available"]         # the mode last confirmed, listed once
    registration.set_read_only(True)                    # the disk monitor reports its verdict again
    assert _listed(raw, "b20") == ["readonly"]
    assert zk_store.bookies()["b20"].read_only is True


def test_a_switch_when_another_process_took_the_id_marks_the_registration_lost(zk_store, raw):
    registration = _registration(zk_store, "b21")
    raw.delete("/bookies/available/b21")
    raw.create("/bookies/readonly/b21", b"{}", ephemeral=True)      # another session holds the id now
    with pytest.raises(MetadataError, match="another live process"):
        registration.set_read_only(True)
    assert registration.lost
