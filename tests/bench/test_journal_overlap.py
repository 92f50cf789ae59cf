"""bench/journal_overlap.py: both orders run on real files with real fdatasyncs and report every record; bad inputs
are refused by name."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from bench import journal_overlap


def test_both_orders_run_alternating_and_report_every_record(tmp_path: Path) -> None:
    result = journal_overlap.run(tmp_path, seconds=0.5, works_us=[10.0], rounds=2)
    assert set(result["runs"]) == {"serial 10 us", "overlap 10 us"}
    for name, runs in result["runs"].items():
        assert [run["round"] for run in runs] == [0, 1], name
        for run in runs:  # 3 appenders at 1,000 records/s for half a second
            assert 3 * 100 <= run["records"] <= 3 * 510, name
            assert 0 < run["p50_ms"] <= run["p90_ms"] <= run["p99_ms"], name
        assert result["medians"][name]["p50_ms"] == pytest.approx(statistics.median(run["p50_ms"] for run in runs))
    assert list(tmp_path.iterdir()) == []  # every file removed


def test_the_writeback_call_reaches_the_kernel(tmp_path: Path) -> None:
    start = journal_overlap.start_writeback()
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    with path.open("r+b") as file:
        start(file.fileno(), 0, 8192)  # a real file: accepted
    with pytest.raises(OSError, match="sync_file_range"):
        start(-1, 0, 8192)  # a bad descriptor: the kernel's error, not silence


def test_an_unknown_order_and_bad_work_are_refused_by_name(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        journal_overlap.one_run(tmp_path, "sideways", 0.0, 0.1)
    with pytest.raises(SystemExit):
        journal_overlap.main(["--work-us", "1000"])
    assert "--work-us must be between 0 and 900" in capsys.readouterr().err
