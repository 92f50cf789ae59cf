"""Ledger passwords sealed to the repair key, per-ledger passwords for repair, and authority to delete (fakes)."""
from __future__ import annotations

import pytest

from pyspark_ledger.client.autorecovery import AutoRecovery
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.errors import (InternalError, InvalidConfigurationError, NoSuchLedgerError, RepairKeyError,
                                   UnauthorizedError)
from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.protocol.ledger_rules import check_transition
from pyspark_ledger.security.repair_key import RepairKey, save_private_key
from pyspark_ledger.security.repair_store import register_repair_public_key


@pytest.fixture
def key_file(tmp_path):
    key = RepairKey.generate()
    path = tmp_path / "repair.key"
    save_private_key(key, str(path))
    return str(path)


def closed_ledger(client, password: bytes, entries: int = 6) -> int:
    with client.create_ledger(3, 3, 2, password=password) as writer:
        for index in range(entries):
            writer.append(b"e%d" % index)
        return writer.ledger_id


def register(store, key_file):
    from pyspark_ledger.security.repair_key import load_private_key
    register_repair_public_key(store, load_private_key(key_file).public)


def test_without_a_cluster_key_nothing_is_sealed_and_the_password_is_needed(client, make_client, store, key_file):
    ledger_id = closed_ledger(client, b"pw")
    assert client.ledger_metadata(ledger_id).repair_secret == ""
    admin = make_client(repair_key_file=key_file)
    with pytest.raises(UnauthorizedError, match="no sealed secret .*password is needed"):
        admin.delete_ledger(ledger_id)
    with pytest.raises(UnauthorizedError, match=f"ledger {ledger_id}: no password was given.*no sealed secret"):
        admin.repair_password(ledger_id)
    assert admin.repair_password(ledger_id, passwords=[b"a", b"pw", b"b"]) == b"pw"
    admin.delete_ledger(ledger_id, b"pw")
    with pytest.raises(NoSuchLedgerError):
        client.ledger_metadata(ledger_id)


def test_the_client_reads_the_public_key_once(make_client, store, key_file):
    early = make_client()
    closed_ledger(early, b"x")           # reads (and caches) "no key yet"
    register(store, key_file)
    late = make_client()
    assert late.ledger_metadata(closed_ledger(late, b"pw")).repair_secret
    assert early.ledger_metadata(closed_ledger(early, b"pw")).repair_secret == "", "cached for the client's life"


def test_autorecovery_uses_each_ledgers_own_password_and_reports_the_ones_nothing_opens(
        make_client, store, cluster, key_file):
    plain = make_client(seed=3)
    legacy = closed_ledger(plain, b"old-pw")            # before the repair key: nothing sealed
    forgotten = closed_ledger(plain, b"lost-pw")
    register(store, key_file)
    sealed = [closed_ledger(make_client(seed=4), password) for password in (b"one", b"two")]
    ensembles = {lid: set(plain.ledger_metadata(lid).fragments[0].bookies) for lid in [legacy, forgotten, *sealed]}
    [victim, *_] = sorted(set.intersection(*ensembles.values()))
    cluster.set_down(victim, deregister=True)
    admin = make_client(seed=5, repair_key_file=key_file)
    report = AutoRecovery(admin, [b"wrong", b"old-pw"], delay_s=0, interval_s=1).run_once()
    assert sorted(r["ledger_id"] for r in report.repaired) == sorted([legacy, *sealed])
    [failed] = report.failed
    assert failed["ledger_id"] == forgotten
    assert "none of the 2 passwords given matches" in failed["error"] and "no sealed secret" in failed["error"]
    for ledger_id, password in [(legacy, b"old-pw"), (sealed[0], b"one"), (sealed[1], b"two")]:
        assert victim not in admin.ledger_metadata(ledger_id).fragments[0].bookies
        with admin.open_ledger(ledger_id, password, recovery=False) as reader:
            assert [e.data for e in reader.read(0, 5)] == [b"e%d" % i for i in range(6)]
    # a client without the key repairs a sealed ledger only with its password
    with pytest.raises(UnauthorizedError, match="does not hold the repair key"):
        plain.rereplicate(sealed[0], passwords=[b"old-pw"])
    with pytest.raises(UnauthorizedError, match="wrong password"):
        admin.rereplicate(forgotten, b"nope")


def test_recover_ledger_with_the_repair_key(make_client, store, key_file):
    register(store, key_file)
    writer = make_client().create_ledger(3, 3, 2, password=b"writer-pw")
    for index in range(4):
        writer.append(b"e%d" % index)
    admin = make_client(seed=2, repair_key_file=key_file)
    metadata = admin.recover_ledger(writer.ledger_id)
    assert (metadata.state, metadata.last_entry_id) == (CLOSED, 3)
    with pytest.raises(UnauthorizedError, match="does not hold the repair key"):
        make_client(seed=3).recover_ledger(writer.ledger_id)


def test_delete_needs_the_password_or_the_repair_key(client, make_client, store, key_file):
    register(store, key_file)
    ledger_id = closed_ledger(client, b"pw")
    for password in (None, b"", b"wrong", "wrong"):
        with pytest.raises(UnauthorizedError, match="give the ledger's password or use the cluster's repair key"):
            client.delete_ledger(ledger_id, password)
    other_key = RepairKey.generate()
    other_file = str(store.inner.uri).split("///")[1].rsplit("/", 1)[0] + "/other.key"
    save_private_key(other_key, other_file)
    with pytest.raises(UnauthorizedError, match=f"sealed to repair key .*this repair key is {other_key.key_id}"):
        make_client(repair_key_file=other_file).delete_ledger(ledger_id)
    assert client.ledger_metadata(ledger_id).state == CLOSED, "still there"
    make_client(repair_key_file=key_file).delete_ledger(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        client.delete_ledger(ledger_id, b"pw")
    unprotected = closed_ledger(client, b"")
    client.delete_ledger(unprotected)  # a ledger created without a password needs none


def test_bad_repair_key_settings(make_client, tmp_path, store):
    for bad in ("", 5, b"/x"):
        with pytest.raises(InvalidConfigurationError, match="repair_key_file"):
            ClientConfig(repair_key_file=bad)
    with pytest.raises(RepairKeyError, match="repair key file .*cannot read it"):
        make_client(repair_key_file=str(tmp_path / "missing.key"))


def test_the_sealed_secret_cannot_change(client, store, key_file):
    register(store, key_file)
    metadata = client.ledger_metadata(closed_ledger(client, b"pw"))
    with pytest.raises(InternalError, match="repair_secret"):
        check_transition(metadata.with_changes(state="OPEN"), metadata.with_changes(repair_secret=""))
