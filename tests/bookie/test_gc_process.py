"""Garbage collection with real processes: bookies + LedgerClient, a deleted ledger's data leaves the bookies.

Runs against SQLite and a real ZooKeeper (the listing walks its znode tree)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bookie_server.entry_log import LOG_SUFFIX
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.files import numbered_files
from bookie_server.index import LedgerIndex
from pyspark_ledger.client import BookieStatus, LedgerClient

from pyspark_ledger.entry import master_key
from tests.conftest import backend_uri

from .conftest import scrape, wait_until

GC_FLAGS = {"gc_interval": 0.2, "checkpoint_interval": 0.2, "entry_log_size": 64 * 1024}
ENTRIES = 120
PW_KEY = master_key(b"pw")  # the ledgers' password: bookies serve raw reads only with its key


@pytest.fixture(params=["sqlite", "zookeeper"])
def metadata_uri(request, tmp_path) -> str:
    """Overrides the conftest's SQLite-only URI: each test runs with both metadata stores."""
    return backend_uri(request, tmp_path, request.param)


def index_file(bookie, ledger_id: int) -> Path:
    return LedgerIndex(bookie.data_dir / "index", 1).index_path(ledger_id)


def raw_entries(client, ledger_id: int) -> dict[int, bytes]:
    """Every stored entry of the ledger on one bookie, as stored (encoded)."""
    found: dict[int, bytes] = {}
    while len(found) < ENTRIES:
        reply = client.read(ledger_id, len(found), ENTRIES - 1, master_key=PW_KEY)
        assert reply.status == BookieStatus.OK, (ledger_id, len(found), reply.status, reply.message)
        found.update(reply.entries)
    return found


def logs_holding_only(bookie, ledger_id: int) -> list[Path]:
    """Sealed entry logs (all but the newest) whose records all belong to ``ledger_id``."""
    logs = numbered_files(bookie.data_dir / "entry_logs", LOG_SUFFIX)[:-1]
    return [path for _, path in logs if {r.ledger_id for r in EntryLogScan(path).records()} == {ledger_id}]


def write_ledger(ledgers: LedgerClient, name: str) -> int:
    with ledgers.create_ledger(2, 2, 2, password=b"pw") as writer:
        futures = [writer.append_async(f"{name} entry {index} ".encode() * 60) for index in range(ENTRIES)]
        assert [future.result(30) for future in futures] == list(range(ENTRIES))
        return writer.ledger_id


def test_a_deleted_ledger_leaves_the_bookies_and_the_other_stays_readable(make_bookie, metadata_uri, client_for):
    bookies = [make_bookie(f"bookie-{index}", **GC_FLAGS).start() for index in range(2)]
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 2, what="both bookies registered")
        doomed, kept = write_ledger(ledgers, "doomed"), write_ledger(ledgers, "kept")
        clients = [client_for(bookie) for bookie in bookies]
        stored = [raw_entries(client, kept) for client in clients]
        for bookie in bookies:
            wait_until(lambda: index_file(bookie, doomed).exists() and logs_holding_only(bookie, doomed),
                       what="the doomed ledger's index file and entry logs")

        ledgers.delete_ledger(doomed, b"pw")
        for bookie, client in zip(bookies, clients):
            wait_until(lambda: client.read(doomed, 0, master_key=PW_KEY).status == BookieStatus.NO_SUCH_LEDGER,
                       what="NO_SUCH_LEDGER for the deleted ledger")
            wait_until(lambda: not index_file(bookie, doomed).exists() and not logs_holding_only(bookie, doomed),
                       what="the deleted ledger's index file and entry logs to go")
            # the pass that deleted the files counts them when it ends, a moment later
            metrics = wait_until(lambda: (lambda m: m.get("bookie_gc_ledgers_collected_total") == 1 and m)(
                scrape(bookie.metrics_url)), what="the pass's metrics")
            assert metrics["bookie_gc_entry_logs_deleted_total"] >= 1
            assert metrics["bookie_gc_bytes_reclaimed_total"] > 0
            log_text = (bookie.data_dir / "bookie-stderr.log").read_text()
            assert re.search(rf"garbage collection: deleted 1 ledgers \[{doomed}\], [1-9]\d* entry logs", log_text)
        assert [entry.data for entry in ledgers.open_ledger(kept, b"pw").read()] == \
            [f"kept entry {index} ".encode() * 60 for index in range(ENTRIES)]

        bookies[0].restart()  # a clean stop
        bookies[1].kill()  # kill -9
        bookies[1].start()
        for bookie, expected in zip(bookies, stored):
            client = client_for(bookie)
            assert client.read(doomed, 0, master_key=PW_KEY).status == BookieStatus.NO_SUCH_LEDGER
            assert raw_entries(client, kept) == expected  # byte for byte, on each bookie
            assert not index_file(bookie, doomed).exists() and index_file(bookie, kept).exists()


def test_a_bookie_with_gc_off_keeps_everything(make_bookie, metadata_uri, client_for):
    bookie = make_bookie("bookie", gc_interval=0, checkpoint_interval=0.2).start()
    other = make_bookie("other", **GC_FLAGS).start()
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 2, what="both bookies registered")
        doomed = write_ledger(ledgers, "doomed")
        ledgers.delete_ledger(doomed, b"pw")
        wait_until(lambda: client_for(other).read(doomed, 0, master_key=PW_KEY).status == BookieStatus.NO_SUCH_LEDGER,
                   what="the collecting bookie to delete it")
        # --gc-interval 0: never collected
        assert client_for(bookie).read(doomed, 0, master_key=PW_KEY).status == BookieStatus.OK
        assert "garbage collection off" in (bookie.data_dir / "bookie-stderr.log").read_text()
        assert not any(name.startswith("bookie_gc_passes_total") for name in scrape(bookie.metrics_url))
        assert "garbage collection every 0.2 s" in (other.data_dir / "bookie-stderr.log").read_text()


def test_copies_re_replicated_away_from_a_returning_bookie_are_collected(make_bookie, metadata_uri, client_for):
    """A bookie away while its copies were re-replicated elsewhere comes back and deletes its left-overs
    (--gc-overreplicated-wait); the ledger stays whole on the bookies that hold it now."""
    flags = {**GC_FLAGS, "gc_overreplicated_wait": 1.0}
    bookies = {bookie.bookie_id: bookie for bookie in (make_bookie(f"bookie-{index}", **flags).start()
                                                        for index in range(3))}
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: len(ledgers.bookies()) == 3, what="three bookies registered")
        moved, kept = write_ledger(ledgers, "moved"), write_ledger(ledgers, "kept")  # E = Qw = 2 of 3 bookies
        away_id = ledgers.ledger_metadata(moved).fragments[0].bookies[0]
        away = bookies[away_id]
        away.stop()  # a clean stop deregisters at once
        wait_until(lambda: away_id not in ledgers.bookies(), what="the stopped bookie to deregister")
        report = ledgers.rereplicate(moved, b"pw")
        assert [r["lost"] for r in report.replaced] == [away_id]
        assert away_id not in ledgers.ledger_metadata(moved).fragments[0].bookies

        away.start()
        client = client_for(away)
        wait_until(lambda: client.read(moved, 0, master_key=PW_KEY).status == BookieStatus.NO_SUCH_LEDGER, timeout=30,
                   what="the returning bookie to collect its left-over copies")
        log_text = (away.data_dir / "bookie-stderr.log").read_text()
        assert f"deleted the left-over copies of 1 ledgers [{moved}]" in log_text
        if away_id in ledgers.ledger_metadata(kept).fragments[0].bookies:
            assert client.read(kept, 0, master_key=PW_KEY).status == BookieStatus.OK, "a ledger still naming it stays"
        assert [entry.data for entry in ledgers.open_ledger(moved, b"pw").read()] == \
            [f"moved entry {index} ".encode() * 60 for index in range(ENTRIES)]
