"""Smoke runs of the recovery, replay and scaling benchmarks in ``--quick`` mode, each as
``python -m bench`` runs it (a child process writing its JSON), with real bookie processes: each took
6-14 s here at load 3-5. ``streaming_latency.py`` is not run here: its quick run takes about a minute
(Spark's start-up); ``python -m bench --quick --only streaming_latency`` runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.__main__ import stop_group

ROOT = Path(__file__).resolve().parents[2]


def quick_run(script: str, tmp_path: Path) -> dict:
    """Run ``bench/<script> --quick`` in its own process group; the group is ended also on failure."""
    out = tmp_path / f"{script}.json"
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / script), "--quick", "--out", str(out)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        stop_group(process)  # bookies and writers it started, if it did not finish
    assert process.returncode == 0, stderr[-2000:]
    return json.loads(out.read_text())


def test_recovery_closes_the_killed_writers_ledger_with_every_confirmed_entry(tmp_path):
    result = quick_run("recovery.py", tmp_path)
    one, windowed = result["runs"]  # interleaved: W=1 first, then the default window
    assert (one["window"], windowed["window"]) == (1, result["default_window"])
    for run in (one, windowed):
        assert result["entries"] == 20_000 and run["last_entry_id"] >= 19_999 and run["recovery_seconds"] > 0
        assert run["entries_read_forward"] == run["last_entry_id"] - run["last_add_confirmed_before"] >= 0


def test_replay_reads_the_bookies_own_replay_time_and_the_plain_read(tmp_path):
    (run,) = quick_run("replay.py", tmp_path)["runs"]
    assert run["journal_bytes"] > 32_000_000 and run["records"] > 1_900 and run["replay_seconds"] > 0
    assert run["plain_read_mb_per_s"] > 0 and run["ratio_to_plain_read"] > 0 and run["warm_read_mb_per_s"] > 0
    assert run["direct_read_mb_per_s"] > 0 or run["direct_read_error"]  # tmpfs refuses O_DIRECT


def test_scaling_runs_every_shape(tmp_path):
    shapes = quick_run("scaling.py", tmp_path)["shapes"]
    assert list(shapes) == ["1_bookie", "3_bookies", "5_bookies_striped"]
    for shape in shapes.values():
        (run,) = shape["runs"]
        assert run["entries"] > 0 and run["entries_per_s"] > 0 and run["p99_ms"] >= run["p50_ms"]
