"""The tables of the recovery, replay, scaling and streaming-latency benchmarks, from small fixed results
(no benchmark runs here), and their place in the runner and the README. Smoke runs of the scripts:
``test_bench_more_smoke.py``."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import readme, report
from bench.registry import by_name
from bench.replay import IN_PLACE, REPLAYED

ROOT = Path(__file__).resolve().parents[2]


def record(document: dict) -> dict:
    return {"repetition": 0, "seconds": 30.0, "load_average_before": [3.0, 1.0, 1.0],
            "load_average_after": [4.0, 1.0, 1.0], "result": document}


def session() -> dict:
    return {"schema": 1, "mode": "quick", "date": "2026-11-25T23:00:00+00:00", "note": "quick: fixed",
            "git": {"commit": "abcdef0123"}, "machine": {"cpus": 2},
            "benchmarks": {
                "recovery": [record({"benchmark": "recovery", "entries": 100_000, "goal_seconds": 1.0,
                                     "default_window": 256,
                                     "runs": [{"window": w, "recovery_seconds": s, "entries_read_forward": n}
                                              for w, s, n in ((1, 8.0, 100), (256, 0.8, 100), (1, 12.0, 2_000),
                                                              (256, 1.2, 2_000), (1, 4.5, 300), (256, 0.9, 300))]})],
                "replay": [record({"benchmark": "replay", "written_mb": 256, "runs": [
                    {"replay_mb_per_s": 100.0, "plain_read_mb_per_s": 400.0, "direct_read_mb_per_s": 150.0,
                     "warm_read_mb_per_s": 900.0, "start_to_ready_seconds": 3.0},
                    {"replay_mb_per_s": 150.0, "plain_read_mb_per_s": 300.0, "direct_read_mb_per_s": 250.0,
                     "warm_read_mb_per_s": 1_100.0, "start_to_ready_seconds": 2.5}]})],
                "scaling": [record({"benchmark": "scaling", "shapes": {
                    "1_bookie": {"runs": [{"entries_per_s": 20_000, "p50_ms": 10.0, "p99_ms": 30.0}]},
                    "3_bookies": {"runs": [{"entries_per_s": 10_000, "p50_ms": 20.0, "p99_ms": 60.0}]},
                    "5_bookies_striped": {"runs": [{"entries_per_s": 12_000, "p50_ms": 15.0, "p99_ms": 50.0}]}}})],
                "streaming_latency": [{"repetition": 0, "error": "exit status 1: ...\nRuntimeError: no Spark"}]}}


def test_recovery_is_set_beside_its_goal():
    table = report.build_tables(session())["recovery"]
    row, forward = table.rows
    assert row.label.startswith("recovery of 100,000 confirmed entries") and row.lower_is_better
    assert row.cells == {"ours": [0.8, 1.2, 0.9], "one": [8.0, 12.0, 4.5], "goal": [1.0]}
    assert report.ratio_text(row, "ours", "goal") == "0.90"
    assert report.ratio_text(row, "ours", "one") == "0.10"  # paired: 0.1, 0.1, 0.2
    assert forward.cells == {"ours": [100, 2_000, 300], "one": [100, 2_000, 300], "goal": []}
    assert report.cell_text(forward.cells["ours"]) == "300 (100–2,000)"
    assert "window 256" in table.columns["ours"]


def test_replay_is_divided_by_the_plain_read_of_the_same_run():
    table = report.build_tables(session())["replay"]
    speed, restart = table.rows
    assert speed.label == "journal of 256 MB written, replayed after kill -9" and speed.unit == "MB/s"
    assert report.ratio(speed.cells["replay"], speed.cells["plain"]) == pytest.approx((0.25 + 0.5) / 2)  # paired
    assert restart.cells == {"replay": [3.0, 2.5], "plain": [], "direct": [], "warm": []} and restart.lower_is_better
    assert "| 125 (100–150) | 350 (300–400) | 200 (150–250) | 1,000 (900–1,100) | 0.38 | 0.63 |" in \
        report.markdown_table(table)


def test_scaling_compares_3_with_1_and_striped_5_with_3():
    table = report.build_tables(session())["scaling"]
    throughput, p50, p99 = table.rows
    assert throughput.cells == {"one": [20_000], "three": [10_000], "five": [12_000]}
    assert report.ratio_text(throughput, "three", "one") == "0.50"
    assert report.ratio_text(throughput, "five", "three") == "1.20"
    assert p50.lower_is_better and p99.cells["five"] == [50.0]


def test_a_failed_streaming_run_leaves_its_cells_empty_and_says_why():
    table = report.build_tables(session())["streaming_latency"]
    assert all(not values for row in table.rows for values in row.cells.values())
    block = report.table_block(session(), table)
    assert "`streaming_latency` failed: RuntimeError: no Spark" in block
    assert "p50 ≤ 1.5 × the trigger interval" in block


def test_streaming_latency_is_divided_by_the_trigger():
    data = session()
    data["benchmarks"]["streaming_latency"] = [record({"trigger_seconds": 1.0, "p50_ms": 900.0, "p99_ms": 1800.0})]
    p50, p99 = report.build_tables(data)["streaming_latency"].rows
    assert p50.cells == {"ours": [900.0], "trigger": [1000.0]} and report.ratio_text(p99, "ours", "trigger") == "1.80"


def test_the_runner_knows_them_and_the_readme_has_their_tables():
    assert [b.name for b in by_name(["recovery", "replay", "scaling", "streaming_latency", "tls"])] == \
        ["tls", "recovery", "replay", "scaling", "streaming_latency"]
    text = (ROOT / "README.md").read_text()
    names = {match.group("name") for match in readme.BLOCK.finditer(text)}
    assert {"recovery", "replay", "scaling", "streaming_latency"} <= names


def test_the_replay_line_the_benchmark_reads_is_the_one_the_bookie_logs():
    from bookie_server import storage_replay
    source = Path(storage_replay.__file__).read_text()
    assert "replayed %d journal records from %d files in %.3f s" in source
    line = "bookie storage /d: replayed 1954 journal records from 1 files in 0.169 s, removed 0 index files"
    assert REPLAYED.search(line).groups() == ("1954", "1", "0.169")
    assert "(%d bodies found in the entry logs)" in source
    line = ("bookie storage /d: replayed 1954 journal records from 1 files in 0.169 s (1953 bodies found in the entry "
            "logs), removed 0 index files")
    assert REPLAYED.search(line).groups() == ("1954", "1", "0.169") and IN_PLACE.search(line).group(1) == "1953"
