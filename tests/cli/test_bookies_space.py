"""``ledger bookies`` shows the free and total space of each real bookie's journal and ledger dirs.

Two bookie processes (on SQLite, and on ZooKeeper where one is installed): one with its journal inside its data dir, one with its
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
import time
import uuid
from pathlib import Path

import pytest

from pyspark_ledger.testing.bookies import BookieProcess
from tests.cli.test_admin_cli import run_ledger
from tests.conftest import backend_uri
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


def mismatches(row: dict, places: dict[str, Path]) -> list[str]:
    """How the row's figures differ from statvfs of each area's directory beyond the tolerance (none: [])."""
    found = []
    for area, directory in places.items():
        free, total = statvfs_space(directory)
        listed_free, listed_total = row[f"{area}_free_bytes"], row[f"{area}_total_bytes"]
        if listed_total != total or listed_free is None or abs(listed_free - free) > TOLERANCE:
            found.append(f"{row['bookie_id']} {area}: listed {listed_free}/{listed_total}, statvfs {free}/{total}")
    return found


def listing_matches(uri: str, places: dict[str, dict[str, Path]], timeout: float = REFRESH_WAIT_S) -> dict:
    """The listing once every bookie's figures match statvfs (the machine's other writers may move the free
    space past the tolerance between two refreshes, so a mismatch gets until the next refreshes to go)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = listed(uri)
        assert set(rows) == set(places)
        found = [line for bookie_id, areas in places.items() for line in mismatches(rows[bookie_id], areas)]
        if not found:
            return rows
        if time.monotonic() > deadline:
            pytest.fail(f"the listing does not match statvfs after {timeout} s: {'; '.join(found)}")
        time.sleep(1.0)


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


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def test_the_listing_shows_each_bookies_disk_space_as_statvfs_does(request, tmp_path, outside_journal_dir, backend):
    uri = backend_uri(request, tmp_path, backend)
    inside = BookieProcess(tmp_path / "inside", uri)
    outside = BookieProcess(tmp_path / "outside", uri,
                            journal_dir=outside_journal_dir or tmp_path / "outside-journal")
    with inside, outside:
        places = {inside.bookie_id: {"journal": inside.data_dir / "journal",
                                     "ledgers": inside.data_dir / "entry_logs"},
                  outside.bookie_id: {"journal": Path(outside.flags["journal_dir"]),
                                      "ledgers": outside.data_dir / "entry_logs"}}
        rows = listing_matches(uri, places)
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
            wait_until(lambda: listed(uri)[inside.bookie_id]["ledgers_free_bytes"] < before - FILLER + TOLERANCE,
                       timeout=REFRESH_WAIT_S, interval=1.0,
                       what="the listing to show the ledger dir's free space shrunk by the filler")
            listing_matches(uri, places)
        finally:
            filler.unlink()
