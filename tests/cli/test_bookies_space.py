"""``ledger bookies`` shows the free and total space of each real bookie's journal and ledger dirs.

Two bookie processes: one with its journal inside its data dir, one with its
journal on another file system (/dev/shm, when it is one), so the two figures
of a bookie are seen to come from different places. The listing must match
``os.statvfs`` of the directories within a tolerance (other programs write to
the same disk meanwhile), and follow when the space of the ledger dir shrinks
(the bookie refreshes its registration every 10 s).
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from pyspark_ledger.testing.bookies import BookieProcess
from tests.cli.test_admin_cli import run_ledger
from tests.waiting import wait_until

MIB = 1024 * 1024
TOLERANCE = 128 * MIB  # other writers on the machine move the free space a little meanwhile
FILLER = 768 * MIB  # well above the tolerance: the refreshed figure must have seen it
REFRESH_WAIT_S = 40  # the bookie refreshes every 10 s; slack for a loaded machine


def statvfs_space(directory: Path) -> tuple[int, int]:
    """(free for an unprivileged user, total) in bytes, as the file system says."""
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


def listed(uri: str) -> dict[str, dict]:
    result = run_ledger("--metadata", uri, "--json", "bookies")
    assert result.returncode == 0, result.stderr
    return {row["bookie_id"]: row for row in json.loads(result.stdout)}


def matches(row: dict, area: str, directory: Path) -> bool:
    free, total = statvfs_space(directory)
    return row[f"{area}_total_bytes"] == total and abs(row[f"{area}_free_bytes"] - free) <= TOLERANCE


@pytest.fixture
def outside_journal_dir(tmp_path):
    """A journal dir on another file system than tmp_path (/dev/shm), or None if there is none; removed after."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev or not os.access(shm, os.W_OK):
        yield None
        return
    directory = shm / f"ledger-test-journal-{uuid.uuid4().hex[:8]}"
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_listing_shows_each_bookies_disk_space_as_statvfs_does(tmp_path, outside_journal_dir):
    uri = f"sqlite:///{tmp_path}/metadata.db"
    inside = BookieProcess(tmp_path / "inside", uri)
    outside = BookieProcess(tmp_path / "outside", uri,
                            journal_dir=outside_journal_dir or tmp_path / "outside-journal")
    with inside, outside:
        places = {inside.bookie_id: (inside.data_dir / "journal", inside.data_dir / "entry_logs"),
                  outside.bookie_id: (Path(outside.flags["journal_dir"]), outside.data_dir / "entry_logs")}
        rows = listed(uri)
        assert set(rows) == set(places)
        for bookie_id, (journal, ledgers) in places.items():
            assert matches(rows[bookie_id], "journal", journal), (rows[bookie_id], statvfs_space(journal))
            assert matches(rows[bookie_id], "ledgers", ledgers), (rows[bookie_id], statvfs_space(ledgers))
        if outside_journal_dir is not None:
            row = rows[outside.bookie_id]
            assert row["journal_total_bytes"] != row["ledgers_total_bytes"], "both figures are of one disk"

        table = run_ledger("--metadata", uri, "bookies").stdout
        assert " free of " in table and "unknown" not in table, table

        before = rows[inside.bookie_id]["ledgers_free_bytes"]
        filler = inside.data_dir / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, FILLER)
        finally:
            os.close(fd)
        try:
            def refreshed():
                row = listed(uri)[inside.bookie_id]
                return row if row["ledgers_free_bytes"] < before - FILLER + TOLERANCE else None
            row = wait_until(refreshed, timeout=REFRESH_WAIT_S, interval=1.0,
                             what="the listing to show the ledger dir's free space shrunk by the filler")
            assert matches(row, "ledgers", inside.data_dir / "entry_logs"), row
        finally:
            filler.unlink()
