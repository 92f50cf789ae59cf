"""The repair key end to end, with real bookie processes and the `ledger` CLI in subprocesses.

Three ledgers with three passwords lose a bookie for good; ONE ``ledger autorecovery --once --repair-key FILE``
repairs all three; deleting needs the ledger's password or the repair key; the metadata holds no password.
"""
from __future__ import annotations

import base64
import os
import stat

import pytest

from pyspark_ledger.client.bookie_rpc import BookieClient
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import NoSuchLedgerError, RepairKeyError, UnauthorizedError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.security.repair_key import RepairKey, load_private_key, sealed_key_id
from pyspark_ledger.testing.bookies import BookieCluster
from tests.cli.test_admin_cli import run_ledger
from tests.waiting import wait_until

PASSWORDS = (b"alpha-pw", b"bravo-pw", b"charlie-pw")
ENTRIES = 30
CLEAN_ENV = {"LEDGER_PASSWORD": "", "LEDGER_REPAIR_KEY": ""}


@pytest.fixture
def cluster(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    bookies = BookieCluster(4, tmp_path / "bookies", uri)
    try:
        bookies.start()
        yield uri, bookies
    finally:
        bookies.stop()


def cli(uri: str, *args: str):
    return run_ledger("--metadata", uri, *args, env=CLEAN_ENV)


def write(client: LedgerClient, password: bytes) -> int:
    with client.create_ledger(3, 3, 2, password=password) as writer:
        for index in range(ENTRIES):
            writer.append(b"%s entry %d" % (password, index))
        return writer.ledger_id


def read_all(client: LedgerClient, ledger_id: int, password: bytes) -> list[bytes]:
    with client.open_ledger(ledger_id, password, recovery=False) as reader:
        return [entry.data for entry in reader.read(0, ENTRIES - 1)]


def test_one_autorecovery_repairs_ledgers_of_three_passwords_and_delete_needs_authority(cluster, tmp_path):
    uri, bookies = cluster
    key_file = tmp_path / "admin" / "repair.key"
    key_file.parent.mkdir()
    made = cli(uri, "security", "init-repair-key", "--out", str(key_file))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert f"export LEDGER_REPAIR_KEY={key_file}" in made.stdout
    again = cli(uri, "security", "init-repair-key", "--out", str(tmp_path / "admin" / "second.key"))
    assert again.returncode == 1 and "already has repair key" in again.stderr and "keep using" in again.stderr
    assert not (tmp_path / "admin" / "second.key").exists()
    key_id = load_private_key(str(key_file)).key_id

    with LedgerClient(uri) as client:                       # an ordinary client: no repair key
        ids = [write(client, password) for password in PASSWORDS]
        # the metadata holds no password and no master key, only the secret sealed to the repair key
        with open_metadata_store(uri) as store:
            for ledger_id, password in zip(ids, PASSWORDS):
                stored = store.read_ledger(ledger_id).value
                doc = stored.to_json()
                key = master_key(password)
                for secret in (password, key.hex().encode(), base64.b64encode(key), base64.b64encode(password)):
                    assert secret not in doc
                assert sealed_key_id(stored.repair_secret) == key_id
                with pytest.raises(RepairKeyError):
                    RepairKey.generate().unseal(stored.repair_secret, ledger_id)

        # delete without a password, or with a wrong one: refused (API and CLI), the ledger stays readable
        target = ids[0]
        for password in (None, b"wrong"):
            with pytest.raises(UnauthorizedError, match="give the ledger's password or use the cluster's repair key"):
                client.delete_ledger(target, password)
        for args in ((), ("--password", "wrong")):
            refused = cli(uri, "ledgers", "delete", str(target), *args)
            assert refused.returncode == 1, refused.stdout
            assert "give the ledger's password or use the cluster's repair key" in refused.stderr
        assert read_all(client, target, PASSWORDS[0]) == [b"alpha-pw entry %d" % i for i in range(ENTRIES)]

        # a bookie that every ensemble holds dies for good
        ensembles = [set(client.ledger_metadata(ledger_id).fragments[0].bookies) for ledger_id in ids]
        victim = sorted(set.intersection(*ensembles))[0]
        index = [bookie.bookie_id for bookie in bookies].index(victim)
        bookies[index].kill()
        wait_until(lambda: victim not in client.bookies(), timeout=20, what=f"{victim} to unregister")

        repaired = cli(uri, "--json", "autorecovery", "--once", "--repair-key", str(key_file))
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        for ledger_id, password in zip(ids, PASSWORDS):
            fragments = client.ledger_metadata(ledger_id).fragments
            assert len(fragments) == 1 and victim not in fragments[0].bookies
            [replacement] = set(fragments[0].bookies) - ensembles[ids.index(ledger_id)]
            expected = [b"%s entry %d" % (password, i) for i in range(ENTRIES)]
            assert read_all(client, ledger_id, password) == expected
            # the new bookie itself holds every entry, verified with the ledger's own password
            with BookieClient(replacement, timeout=30.0) as direct:
                result = direct.read(ledger_id, 0, ENTRIES - 1, master_key=master_key(password))
            codec = EntryCodec("crc32c", password)
            assert [bytes(codec.decode(body, ledger_id, entry_id).payload)
                    for entry_id, body in result.entries] == expected

        # delete with the password (API), with the repair key (CLI), with the repair key (API)
        client.delete_ledger(ids[0], PASSWORDS[0])
        deleted = cli(uri, "ledgers", "delete", str(ids[1]), "--repair-key", str(key_file))
        assert deleted.returncode == 0, deleted.stderr
        with LedgerClient(uri, ClientConfig(repair_key_file=str(key_file))) as admin:
            assert admin.repair_key_id == key_id
            admin.delete_ledger(ids[2])
        for ledger_id in ids:
            with pytest.raises(NoSuchLedgerError):
                client.ledger_metadata(ledger_id)


def test_a_repair_key_file_others_can_read_is_refused_by_the_cli(cluster, tmp_path):
    uri, _ = cluster
    key_file = tmp_path / "repair.key"
    assert cli(uri, "security", "init-repair-key", "--out", str(key_file)).returncode == 0
    os.chmod(key_file, 0o644)
    refused = cli(uri, "autorecovery", "--once", "--repair-key", str(key_file))
    assert refused.returncode == 1 and f"chmod 600 {key_file}" in refused.stderr
