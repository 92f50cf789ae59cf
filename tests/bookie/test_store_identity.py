"""A lost or replaced metadata store never costs a bookie its data (issue 14, part 1).

Real bookie processes and real files: the SQLite file unlinked or replaced under a running bookie and
client; a bookie restarted against a new, empty store; a garbage collector facing a store with another
instance id. And the same refusal on a real ZooKeeper (a new chroot is a new store)."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from bookie_server.index import LedgerIndex
from bookie_server.store_record import STORE_FILE
from pyspark_ledger.client import BookieStatus, LedgerClient
from pyspark_ledger.entry import master_key
from pyspark_ledger.errors import BookieProcessError, DataDirectoryError, InvalidConfigurationError, MetadataError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.instance import INSTANCE_KEY, read_instance_id
from tests.conftest import unique_chroot

from .conftest import scrape, wait_until

PASSWORD = b"pw"
ENTRIES = 40
GC_FLAGS = {"gc_interval": 0.2, "checkpoint_interval": 0.2}


def refusal(bookie, *words: str) -> str:
    """The failed start's one 'bookie-server:' line (the last one: the log grows over starts), naming ``words``
    and never advising --allow-new-data-dir."""
    stderr = (bookie.data_dir / "bookie-stderr.log").read_text()
    assert "Traceback" not in stderr, stderr
    line = [line for line in stderr.splitlines() if line.startswith("bookie-server:")][-1]
    for word in words:
        assert word in line, line
    assert "--allow-new-data-dir" not in line, line
    return line


def write_ledger(ledgers: LedgerClient, name: str = "kept") -> int:
    with ledgers.create_ledger(1, 1, 1, password=PASSWORD) as writer:
        for index in range(ENTRIES):
            writer.append(f"{name} {index}".encode())
        return writer.ledger_id


def read_ledger(ledgers: LedgerClient, ledger_id: int, name: str = "kept") -> None:
    entries = [entry.data for entry in ledgers.open_ledger(ledger_id, PASSWORD).read()]
    assert entries == [f"{name} {index}".encode() for index in range(ENTRIES)]


def sqlite_path(uri: str) -> Path:
    return Path(uri.removeprefix("sqlite://").partition("?")[0])


def move_store(path: Path, to: Path) -> None:
    """Move the SQLite file (and its -wal/-shm, if any) to ``to``."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.replace(f"{path}{suffix}", f"{to}{suffix}")


def assert_fails_loudly(ledgers: LedgerClient, ledger_id: int, how: str) -> None:
    for action in (lambda: ledgers.create_ledger(1, 1, 1, password=PASSWORD),
                   lambda: ledgers.open_ledger(ledger_id, PASSWORD),
                   lambda: ledgers.delete_ledger(ledger_id, PASSWORD)):
        with pytest.raises(MetadataError, match=f"was {how}[a-z ]* while in use.*restore the original file"):
            action()


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_store_file_removed_or_replaced_under_a_bookie_and_a_client_fails_loudly(make_bookie, metadata_uri,
                                                                                  tmp_path, how):
    bookie = make_bookie(**GC_FLAGS).start()
    path = sqlite_path(metadata_uri)
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered")
        ledger_id = write_ledger(ledgers)
        if how == "removed":
            path.unlink()
        else:
            open_metadata_store(f"sqlite://{tmp_path}/fresh.db", create=True).close()
            os.replace(tmp_path / "fresh.db", path)
        assert_fails_loudly(ledgers, ledger_id, how)
        # the bookie's own store (heartbeat, garbage collection) says so too, and deletes nothing
        wait_until(lambda: f"was {how}" in (bookie.data_dir / "bookie-stderr.log").read_text(),
                   what="the bookie to report the lost store")
    assert bookie.is_running
    assert LedgerIndex(bookie.data_dir / "index", 1).index_path(ledger_id).exists()


def test_a_bookie_restarted_against_a_new_empty_store_refuses_and_keeps_its_data(make_bookie, metadata_uri,
                                                                                   tmp_path):
    bookie = make_bookie(**GC_FLAGS).start()
    path = sqlite_path(metadata_uri)
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered")
        ledger_id = write_ledger(ledgers)
    assert bookie.stop() == 0
    with open_metadata_store(metadata_uri) as store:
        original = read_instance_id(store)
    assert json.loads((bookie.data_dir / STORE_FILE).read_text())["instance_id"] == original
    move_store(path, tmp_path / "saved.db")
    before = sorted((p.relative_to(bookie.data_dir), p.stat().st_size) for p in bookie.data_dir.rglob("*")
                    if p.is_file() and p.name != "bookie-stderr.log")

    for allow_new in (False, True):  # --allow-new-data-dir never lets it start against another store
        bookie.flags["allow_new_data_dir"] = allow_new
        with pytest.raises(BookieProcessError, match="exited with status 1"):
            bookie.start()
        refusal(bookie, "is not the store the data of bookie", "nothing was changed", "--adopt-metadata-store")
    with open_metadata_store(metadata_uri) as fresh:
        assert fresh.children("cookies") == []  # nothing published to the new store
    bookie.flags["adopt_metadata_store"] = uuid.uuid4().hex  # names no store: refused
    with pytest.raises(BookieProcessError, match="exited with status 1"):
        bookie.start()
    refusal(bookie, "does not name metadata store")
    del bookie.flags["adopt_metadata_store"]
    bookie.flags["allow_new_data_dir"] = False
    after = sorted((p.relative_to(bookie.data_dir), p.stat().st_size) for p in bookie.data_dir.rglob("*")
                   if p.is_file() and p.name != "bookie-stderr.log")
    assert after == before

    for suffix in ("", "-wal", "-shm"):  # put the original store back: the bookie starts with all its data
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    move_store(tmp_path / "saved.db", path)
    bookie.start()
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered again")
        read_ledger(ledgers, ledger_id)


def test_gc_deletes_nothing_while_the_store_has_another_instance_id(make_bookie, metadata_uri, metadata_store,
                                                                    client_for):
    bookie = make_bookie(**GC_FLAGS).start()
    index = LedgerIndex(bookie.data_dir / "index", 1)
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered")
        ledger_id = write_ledger(ledgers)
        wait_until(lambda: index.index_path(ledger_id).exists(), what="the ledger's index file")
        registered = metadata_store.get(INSTANCE_KEY)
        metadata_store.set(INSTANCE_KEY, uuid.uuid4().hex.encode(), registered.version)  # another store now
        ledgers.delete_ledger(ledger_id, PASSWORD)  # garbage, were the store the bookie's own

        def refusals() -> float:
            return scrape(bookie.metrics_url).get('bookie_gc_passes_total{outcome="store_mismatch"}', 0)
        wait_until(lambda: refusals() >= 5, what="five refused GC passes")
        metadata_store.delete(INSTANCE_KEY)  # an id that cannot be found: refused as well
        seen = refusals()
        wait_until(lambda: refusals() >= seen + 3, what="three more refused GC passes")
        client = client_for(bookie)
        reply = client.read(ledger_id, 0, ENTRIES - 1, master_key=master_key(PASSWORD))
        assert reply.status == BookieStatus.OK and len(reply.entries) == ENTRIES
        assert index.index_path(ledger_id).exists()
        assert scrape(bookie.metrics_url).get("bookie_gc_ledgers_collected_total", 0) == 0
        assert "garbage collection refused" in (bookie.data_dir / "bookie-stderr.log").read_text()

        # the store's own id back: the very same ledger is collected (the refusal above was the only guard)
        metadata_store.create(INSTANCE_KEY, registered.value)
        wait_until(lambda: client.read(ledger_id, 0, master_key=master_key(PASSWORD)).status
                   == BookieStatus.NO_SUCH_LEDGER, what="the deleted ledger collected")


@pytest.mark.zookeeper
def test_a_bookie_refuses_a_new_zookeeper_chroot_and_starts_on_its_own(request, zookeeper_server, tmp_path):
    from pyspark_ledger.testing.bookies import BookieProcess

    own = zookeeper_server.uri(unique_chroot(request, "own-"), session_timeout=2)
    other = zookeeper_server.uri(unique_chroot(request, "other-"), session_timeout=2)
    bookie = BookieProcess(tmp_path / "bookie", own, gc_interval=0.2)
    try:
        bookie.start()
        with LedgerClient(own) as ledgers:
            wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered")
            ledger_id = write_ledger(ledgers)
        assert bookie.stop() == 0
        bookie.metadata_uri = other
        with pytest.raises(BookieProcessError, match="exited with status 1"):
            bookie.start()
        refusal(bookie, "is not the store the data of bookie", "--adopt-metadata-store")
        with open_metadata_store(other) as fresh:
            assert fresh.children("cookies") == [] and read_instance_id(fresh) is not None
        bookie.metadata_uri = own
        bookie.start()
        with LedgerClient(own) as ledgers:
            wait_until(lambda: len(ledgers.bookies()) == 1, what="the bookie registered again")
            read_ledger(ledgers, ledger_id)
    finally:
        bookie.kill()


def test_a_bookie_from_before_instance_ids_records_its_store_only_when_the_store_holds_its_cookie(tmp_path):
    from bookie_server.cookie import plan_cookie

    data_dir = tmp_path / "bookie"
    with open_metadata_store(f"sqlite://{tmp_path}/own.db", create=True) as own, \
            open_metadata_store(f"sqlite://{tmp_path}/new.db", create=True) as new:
        plan_cookie(own, data_dir, "b:1").commit()
        (data_dir / STORE_FILE).unlink()  # as a bookie made before instance ids left its data dir
        with pytest.raises(DataDirectoryError, match="is not the store the data of bookie b:1"):
            plan_cookie(new, data_dir, "b:1", allow_new_data_dir=True)
        assert not (data_dir / STORE_FILE).exists() and new.children("cookies") == []
        plan_cookie(own, data_dir, "b:1").commit()  # its cookie matches: the store is its own, recorded now
        assert json.loads((data_dir / STORE_FILE).read_text())["instance_id"] == read_instance_id(own)


def test_adopt_metadata_store_moves_a_bookie_to_the_store_it_names_only(tmp_path):
    from bookie_server.cookie import plan_cookie

    data_dir = tmp_path / "bookie"
    with open_metadata_store(f"sqlite://{tmp_path}/own.db", create=True) as own, \
            open_metadata_store(f"sqlite://{tmp_path}/new.db", create=True) as new:
        plan_cookie(own, data_dir, "b:1").commit()
        with pytest.raises(InvalidConfigurationError, match="does not name metadata store"):
            plan_cookie(new, data_dir, "b:1", adopt_store=read_instance_id(own))
        plan_cookie(new, data_dir, "b:1", adopt_store=read_instance_id(new)).commit()
        assert json.loads((data_dir / STORE_FILE).read_text())["instance_id"] == read_instance_id(new)
        assert new.children("cookies") == ["b:1"]
        with pytest.raises(DataDirectoryError, match="is not the store the data of bookie b:1"):
            plan_cookie(own, data_dir, "b:1")  # moved: the old store is now the foreign one
