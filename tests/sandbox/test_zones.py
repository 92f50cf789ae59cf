"""`ledger sandbox --zones N`: bookies spread round-robin over N zones, remembered by the data dir.

Real sandboxes in child processes: each bookie is started with ``--zone`` and publishes it (``ledger
bookies`` lists it), a ledger whose ack quorums must span two zones can be placed on them
(``simpletest --min-ack-quorum-zones 2``), a restart without the flag keeps the zones and one with it
re-spreads the same bookies. A count the bookies cannot fill, or out of bounds, is refused before anything
starts.
"""
from __future__ import annotations

import json
import signal

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.sandbox import Sandbox

from .conftest import run_ledger


def zones_listed(uri: str) -> dict[str, str]:
    listed = run_ledger("--metadata", uri, "--json", "bookies")
    assert listed.returncode == 0, listed.stderr
    return {row["bookie_id"]: row["zone"] for row in json.loads(listed.stdout)}


def test_bookies_are_spread_over_the_zones_and_keep_them_across_restarts(tmp_path, sandbox_command):
    data_dir = str(tmp_path / "cluster")
    first = sandbox_command("--bookies", "4", "--zones", "2", "--data-dir", data_dir).wait_ready()
    ids = [bookie_id for bookie_id, _pid in first.bookies]
    assert "sandbox ready: 4 bookies in 2 zones, SQLite metadata" in first.output
    assert "  zone-a: bookie 0, bookie 2" in first.output and "  zone-b: bookie 1, bookie 3" in first.output
    expected = dict(zip(ids, ["zone-a", "zone-b", "zone-a", "zone-b"]))
    assert zones_listed(first.metadata_uri) == expected
    test = run_ledger("--metadata", first.metadata_uri, "simpletest", "-e", "4", "-w", "4", "-a", "3", "-n", "20",
                      "--min-ack-quorum-zones", "2")
    assert test.returncode == 0, test.stderr
    assert first.send(signal.SIGINT) == 0

    again = sandbox_command("--data-dir", data_dir).wait_ready()
    assert [bookie_id for bookie_id, _pid in again.bookies] == ids
    assert zones_listed(again.metadata_uri) == expected, "the data dir remembers the zones"
    assert again.send(signal.SIGINT) == 0

    one = sandbox_command("--data-dir", data_dir, "--zones", "1").wait_ready()
    assert [bookie_id for bookie_id, _pid in one.bookies] == ids
    assert zones_listed(one.metadata_uri) == dict.fromkeys(ids, "zone-a")
    assert one.send(signal.SIGINT) == 0


@pytest.mark.parametrize("args,code,words", [
    (("--bookies", "2", "--zones", "3"), 2,
     "--zones 3 is more zones than the 2 bookies can fill (one bookie per zone at least): give --zones 2 or less"),
    (("--zones", "0"), 2, "argument --zones: must be a whole number from 1 to 26, got '0'"),
    (("--zones", "27"), 2, "argument --zones: must be a whole number from 1 to 26, got '27'"),
])
def test_a_zone_count_the_bookies_cannot_fill_is_refused_before_anything_starts(tmp_path, args, code, words):
    data_dir = tmp_path / "cluster"
    result = run_ledger("sandbox", "--data-dir", str(data_dir), *args)
    assert result.returncode == code, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr
    assert not (data_dir / "sandbox.json").exists()


def test_the_api_refuses_zones_with_a_zone_flag_too():
    with pytest.raises(InvalidConfigurationError, match="give zones=N or the bookie flag zone=NAME, not both"):
        Sandbox(bookies=2, zones=2, zone="zone-x")
    with pytest.raises(InvalidConfigurationError, match="zones must be a whole number from 1 to 26, got True"):
        Sandbox(bookies=2, zones=True)
