"""``python -m bench``'s report side, from a small fixed results document (no benchmark runs here): the
tables and their ratios, latest.md, the PNG plots, the README's generated tables, and the run order."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import plots, readme, report
from bench import __main__ as runner
from bench.registry import BENCHMARKS, Benchmark, by_name, schedule

ROOT = Path(__file__).resolve().parents[2]


def replication_doc(rate: float, fanout: float) -> dict:
    return {"benchmark": "replication",
            "runs": {"1KiB": {"entries_per_s": rate}, "1MiB": {"mb_per_s": 150.0},
                     "paced_1KiB_1000_per_s": {"p50_ms": 2.0, "p99_ms": 9.0}},
            "limits": {"1KiB": {"fsync": {"entries_per_s": 100_000}, "grpc_fanout": {"entries_per_s": fanout}},
                       "1MiB": {"fsync": {"mb_per_s": 200.0}, "grpc_fanout": {"mb_per_s": 300.0},
                                "three_storages": {"mb_per_s": 180.0}},
                       "paced_1KiB_1000_per_s": {"grpc_fanout": {"p50_ms_to_second_ack": 1.0,
                                                                 "p99_ms_to_second_ack": 4.5}}},
            "bookie_storage_alone": {"1KiB": {"entries_per_s": 50_000}},
            "where_the_time_goes": {"1KiB_floor": {"entries_per_s_if_all_cores_did_only_this": 20_000},
                                    "1MiB_floor": {"mb_per_s": 180.0}}}


def nats_doc(rate: float) -> dict:
    return {"benchmark": "nats_jetstream", "nats_server_version": "v2.9.10",
            "ack_semantics": "acks from the page cache",
            "runs": {"1KiB": {"entries_per_s": rate}, "1MiB": {"mb_per_s": 75.0},
                     "paced_1KiB_1000_per_s": {"p50_ms": 1.0, "p99_ms": 3.0}}}


def record(document: dict, repetition: int = 0) -> dict:
    return {"repetition": repetition, "seconds": 10.0, "load_average_before": [1.0, 1.0, 1.0],
            "load_average_after": [2.0, 1.0, 1.0], "result": document}


def session() -> dict:
    """Three interleaved pairs of ours and NATS, a skipped benchmark and a failed one."""
    return {"schema": 1, "mode": "full", "date": "2026-11-25T22:00:00+00:00", "note": "full: a fixed example",
            "git": {"commit": "0123456789abcdef"}, "machine": {"cpus": 2},
            "load_average_before": [1.5, 1.0, 1.0], "load_average_after": [2.5, 1.0, 1.0],
            "benchmarks": {
                "replication": [record(replication_doc(rate, fanout), index) for index, (rate, fanout) in
                                enumerate(((10_000, 20_000), (12_000, 20_000), (9_000, 30_000)))],
                "nats_jetstream": [record(nats_doc(rate), index) for index, rate in enumerate((5_000, 8_000, 3_000))],
                "tls": [{"repetition": 0, "error": "exit status 1: Traceback ...\nRuntimeError: boom"}],
                "striped_reads": [{"repetition": 0, "skipped": "striped_reads.py is not in this checkout"}]}}


def test_cells_hold_every_repeat_and_ratios_pair_the_runs_of_the_same_turn():
    table = report.build_tables(session())["replication"]
    small = table.rows[0]
    assert small.cells["ours"] == [10_000, 12_000, 9_000] and small.cells["nats"] == [5_000, 8_000, 3_000]
    assert report.cell_text(small.cells["ours"]) == "10,000 (9,000–12,000)"
    # paired: 10/5, 12/8, 9/3 -> median 2.0 (the ratio of the medians would be 10/5 = 2.0 too: check fan-out)
    assert report.ratio(small.cells["ours"], small.cells["nats"]) == pytest.approx(2.0)
    assert report.ratio(small.cells["ours"], small.cells["fanout"]) == pytest.approx(0.5)  # .5, .6, .3
    assert report.ratio([1.0, 2.0], [1.0]) == pytest.approx(1.5)  # unpaired: ratio of the medians
    assert report.ratio([], [1.0]) is None
    paced_p99 = table.rows[3]
    assert paced_p99.lower_is_better and paced_p99.cells["fanout"] == [4.5, 4.5, 4.5] and paced_p99.cells["fsync"] == []


def test_markdown_names_the_run_its_load_and_what_is_missing_and_why():
    data = session()
    tables = report.build_tables(data)
    block = report.table_block(data, tables["replication"])
    assert "commit 0123456789" in block and "load average 1.0–2.0 over its runs (full: a fixed example)" in block
    assert "| 1 KiB appends, 2,000 in flight (entries/s; higher is better) | 10,000 (9,000–12,000) | " \
           "5,000 (3,000–8,000) | 100,000 | 20,000 (20,000–30,000) | — | 50,000 | — | 20,000 | 2.00 | 0.50 | 0.50 |" in block
    assert "| 1 MiB appends, 8 in flight (MB/s; higher is better) | 150 | 75.0 | 200 | 300 | — | — | 180 | 180 | 2.00 | 0.50 " \
           "| 0.83 | 0.75 |" in block
    assert "NATS: nats-server v2.9.10. acks from the page cache" in block
    tls = report.table_block(data, tables["tls"])
    assert "`tls` failed: RuntimeError: boom" in tls and "| — | — | — |" in tls
    assert "`striped_reads` skipped: striped_reads.py is not in this checkout" in \
        report.table_block(data, tables["striped_reads"])
    assert "`bookie` was not run in this session." in report.table_block(data, tables["bookie"])
    document = report.markdown_document(data, tables)
    assert "| replication | 3 | 10.0 | 1.0 → 2.0 | ok |" in document
    assert "| tls | 1 | — | ? → ? | failed |" in document


def test_plots_are_pngs_and_tables_without_figures_get_none(tmp_path):
    written = plots.write_plots(report.build_tables(session()), tmp_path)
    assert [path.name for path in written] == ["replication.png"]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written[0].stat().st_size > 5_000


def test_readme_blocks_are_replaced_and_the_prose_around_them_kept():
    text = ("Prose before.\n<!-- bench-table:bookie -->\nold table\n<!-- /bench-table:bookie -->\n"
            "Prose between.\n<!-- bench-table:replication -->\n<!-- /bench-table:replication -->\nProse after.\n")
    data = session()
    fresh = readme.regenerate(text, data)
    tables = report.build_tables(data)
    assert fresh == ("Prose before.\n<!-- bench-table:bookie -->\n" + report.table_block(data, tables["bookie"])
                     + "\n<!-- /bench-table:bookie -->\nProse between.\n<!-- bench-table:replication -->\n"
                     + report.table_block(data, tables["replication"]) + "\n<!-- /bench-table:replication -->\n"
                     "Prose after.\n")
    assert readme.regenerate(fresh, data) == fresh
    with pytest.raises(ValueError, match="bench-table:nope names no table"):
        readme.regenerate("<!-- bench-table:nope -->\n<!-- /bench-table:nope -->", data)


def test_the_readme_tables_are_the_ones_generated_from_the_committed_results():
    text = (ROOT / "README.md").read_text()
    names = {match.group("name") for match in readme.BLOCK.finditer(text)}
    assert {"replication", "bookie", "spark_io", "tls"} <= names, "README.md lost a generated benchmark table"
    committed = json.loads((ROOT / "bench" / "results" / "latest.json").read_text())
    assert readme.regenerate(text, committed) == text, \
        "README.md's benchmark tables were edited by hand or the results changed: run python -m bench.readme"


def test_report_only_remakes_the_committed_latest_md_and_readme_tables_byte_for_byte(tmp_path, monkeypatch):
    """``python -m bench --report-only`` on a copy of the committed results writes the committed latest.md again:
    the report's code and its output are in step (a change to the tables comes with latest.md regenerated).
    The plots are left out (matplotlib takes half a minute on a busy machine; they have a test of their own)."""
    shutil.copy(ROOT / "bench" / "results" / "latest.json", tmp_path / "latest.json")
    monkeypatch.setattr(plots, "write_plots", lambda tables, directory: [])
    assert runner.main(["--report-only", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "latest.md").read_bytes() == (ROOT / "bench" / "results" / "latest.md").read_bytes()
    text = (ROOT / "README.md").read_text()
    assert readme.regenerate(text, json.loads((tmp_path / "latest.json").read_text())) == text


def test_pairs_run_interleaved_and_quick_runs_everything_once():
    full = [(benchmark.name, repetition) for benchmark, repetition in schedule(list(BENCHMARKS), quick=False)]
    assert full[:6] == [("replication", 0), ("nats_jetstream", 0), ("replication", 1), ("nats_jetstream", 1),
                        ("replication", 2), ("nats_jetstream", 2)]
    assert full[6:9] == [("bookie", 0), ("bookie", 1), ("bookie", 2)]
    quick = [benchmark.name for benchmark, _ in schedule(list(BENCHMARKS), quick=True)]
    assert quick == [benchmark.name for benchmark in BENCHMARKS]
    assert [b.name for b in by_name(["nats_jetstream"])] == ["nats_jetstream"]
    with pytest.raises(ValueError, match="unknown benchmark.*nope.*--only takes: replication"):
        by_name(["nope"])


def test_a_missing_optional_script_is_skipped_and_a_missing_required_one_fails(tmp_path):
    optional = Benchmark("later", "not-written-yet.py", (), optional=True)
    assert runner.run_one(optional, True, tmp_path, 0)["skipped"] == "not-written-yet.py is not in this checkout"
    required = Benchmark("needed", "not-written-yet.py", ())
    assert "does not exist" in runner.run_one(required, True, tmp_path, 0)["error"]


def test_a_benchmark_over_its_time_is_stopped_with_every_process_it_started(tmp_path):
    script = tmp_path / "hangs.py"
    pid_file = tmp_path / "child.pid"
    script.write_text("import subprocess, sys, time\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                      f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
                      "time.sleep(120)\n")
    hangs = Benchmark("hangs", str(script), (), timeout_s=3.0)  # an absolute script path stays as it is
    outcome = runner.run_one(hangs, True, tmp_path, 0)
    assert outcome["error"] == "timed out after 3.0 s" and "result" not in outcome
    assert not alive(int(pid_file.read_text()))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_rerun_of_some_benchmarks_replaces_only_their_records_and_says_so():
    previous = session()
    again = {"mode": "full", "date": "2026-11-25T23:00:00+00:00", "git": {"commit": "fedcba"},
             "load_average_before": [3.0, 1.0, 1.0], "load_average_after": [4.0, 1.0, 1.0],
             "benchmarks": {"tls": [record({"benchmark": "tls", "sizes": {}})]}}
    merged = runner.merge(previous, again)
    assert merged["benchmarks"]["replication"] == previous["benchmarks"]["replication"]
    assert "error" not in merged["benchmarks"]["tls"][0] and merged["reruns"][0]["benchmarks"] == ["tls"]
    tables = report.build_tables(merged)
    assert "tls rerun 2026-11-25T23:00:00+00:00 at commit fedcba;" not in report.table_block(merged, tables["tls"])
    assert "tls rerun 2026-11-25T23:00:00+00:00 at commit fedcba (" in report.table_block(merged, tables["tls"])
    assert "rerun" not in report.table_block(merged, tables["replication"])
    dirty = runner.merge(previous, dict(again, git={"commit": "0123456789abc", "uncommitted_changes": True}))
    assert ("tls rerun 2026-11-25T23:00:00+00:00 at commit 0123456789 with uncommitted changes"
            in report.table_block(dirty, report.build_tables(dirty)["tls"]))


def test_goals_are_judged_from_the_tables_ratios_and_say_what_was_not_measured():
    from bench import goals
    data = session()
    tables = report.build_tables(data)
    verdicts = {goal.text: goals.judge(goal, tables, report.ratio) for goal in goals.GOALS}
    # 1 KiB: ours ÷ NATS paired 2.0 (exactly the bound: met), ours ÷ floor 0.5 (missed)
    assert verdicts[goals.GOALS[0].text] == (pytest.approx(2.0), goals.MET)
    assert verdicts[goals.GOALS[1].text] == (pytest.approx(0.5), goals.MISSED)
    # paced p50 2.0 ms against NATS's 1.0 ms: an at-most goal of 1 missed; p99 9.0 ÷ fan-out 4.5 = 2.0 met
    paced_p50 = next(goal for goal in goals.GOALS if goal.text.startswith("paced 1,000/s: p50"))
    paced_fanout = next(goal for goal in goals.GOALS if "fan-out's p99" in goal.text)
    assert verdicts[paced_p50.text] == (pytest.approx(2.0), goals.MISSED)
    assert verdicts[paced_fanout.text] == (pytest.approx(2.0), goals.MET)
    # striped_reads was skipped and spark_io not run: not measured, never met
    for goal in goals.GOALS:
        if goal.table in ("striped_reads", "spark_io", "recovery", "replay", "streaming_latency"):
            assert verdicts[goal.text] == (None, goals.NOT_MEASURED)
    text = report.blocks(data)["goals"]
    assert "| 1 KiB appends, 2,000 in flight: ours ÷ NATS JetStream R3 | 2.00 | ≥ 2 | yes |" in text
    assert "| paced 1,000/s: p50 ours ÷ NATS's p50 | 2.00 | ≤ 1 | **no** |" in text
    assert "commit 0123456789" in text and "not measured in this run" in text
    # limits: the floor is 4 × NATS (paired 20k/5k, 20k/8k, 20k/3k), so 2 × NATS is within reach; at p99 the bare
    # fan-out (4.5 ms) is 1.5 × NATS's 3.0 ms, so p99 ≤ NATS's is beyond any client over that transport
    assert goals.limit_allows(goals.GOALS[0], tables, report.ratio) == (pytest.approx(4.0), True)
    paced_p99 = next(goal for goal in goals.GOALS if goal.text.startswith("paced 1,000/s: p99 ours ÷ NATS"))
    assert goals.limit_allows(paced_p99, tables, report.ratio) == (pytest.approx(1.5), False)
    assert goals.limit_allows(goals.GOALS[1], tables, report.ratio) == (None, None)  # no limit named
    # measured over gRPC, which our adds no longer take (docs/protocol.md W11): shown as a reference, not a bound
    assert "| the bare gRPC fan-out: 1.50 (over gRPC, which our adds no longer take: a reference, not a bound) |" \
        in text
    # 1 MiB: the 3 storage engines at once (180 MB/s, no network: a bound of ours) are 0.6 × the fan-out (300) and
    # 2.4 × NATS: both 1 MiB goals are beyond reach in this run
    large_fanout = next(goal for goal in goals.GOALS if goal.text.startswith("1 MiB appends: ours ÷ the bare"))
    assert goals.limit_allows_by(large_fanout, tables, report.ratio) == ("storage3", pytest.approx(0.6), False)
    assert verdicts[large_fanout.text] == (pytest.approx(0.5), goals.MISSED)
    assert "| 1 MiB appends: ours ÷ the bare gRPC fan-out | 0.50 | ≥ 0.75 | **no** | 3 bookies' storage engines at " \
           "once on this disk (no network, no client): 0.60 (the limit itself misses the goal) |" in text
    large_nats = next(goal for goal in goals.GOALS if goal.text.startswith("1 MiB appends, 8 in flight"))
    assert goals.limit_allows_by(large_nats, tables, report.ratio) == ("storage3", pytest.approx(2.4), False)
    # paced p99's limit misses it, but over gRPC (a reference); both 1 MiB goals' storage limit is no reference
    assert "- 2 goals cannot be met on this machine" in text
    large_row = tables["replication"].rows[1]
    assert large_row.cells["storage3"] == [180.0] * 3 and large_row.cells["floor"] == [180.0] * 3
    for doc in data["benchmarks"]["replication"]:  # without the 3 storages (a run that failed them): the floor
        del doc["result"]["limits"]["1MiB"]["three_storages"]
    no_storages = report.build_tables(data)
    assert goals.limit_allows_by(large_nats, no_storages, report.ratio) == ("floor", pytest.approx(2.4), False)
    assert "- 0 goals cannot be met on this machine" in report.blocks(data)["goals"]  # the floor: a reference
    for doc in data["benchmarks"]["replication"]:  # results from before the 1 MiB floor: the fan-out stands in
        del doc["result"]["where_the_time_goes"]["1MiB_floor"]
    older = report.build_tables(data)
    assert goals.limit_allows_by(large_nats, older, report.ratio) == ("fanout", pytest.approx(4.0), True)
    assert goals.limit_allows(large_fanout, older, report.ratio) == (None, None)
    assert "## goals" in report.markdown_document(data, tables)


def test_the_durable_fan_out_is_the_limit_of_the_paced_goals_when_the_run_has_it():
    from bench import goals
    data = session()
    for doc, p99 in zip(data["benchmarks"]["replication"], (12.0, 13.5, 9.0)):  # ÷ the fan-out's 4.5: 2.67, 3, 2
        doc["result"]["limits"]["paced_1KiB_1000_per_s"]["grpc_fanout_durable"] = {
            "p50_ms_to_second_ack": 1.5, "p99_ms_to_second_ack": p99}
    tables = report.build_tables(data)
    p99_row = tables["replication"].rows[3]
    assert p99_row.cells["durable"] == [12.0, 13.5, 9.0]
    paced_fanout = next(goal for goal in goals.GOALS if "fan-out's p99" in goal.text)
    assert goals.limit_allows_by(paced_fanout, tables, report.ratio) == ("durable", pytest.approx(8 / 3), False)
    paced_nats = [goal for goal in goals.GOALS if goal.text.startswith("paced 1,000/s") and goal.denominator == "nats"]
    assert [goals.limit_allows_by(goal, tables, report.ratio)[:2] for goal in paced_nats] == [
        ("durable", pytest.approx(1.5)), ("durable", pytest.approx(4.0))]  # NATS: 1.0 and 3.0 ms
    text = report.blocks(data)["goals"]
    # the durable fan-out takes its servers' framed add ports, as ours: it bounds ours, and here it misses all 3
    assert "| paced 1,000/s: p99 ours ÷ the bare fan-out's p99 | 2.00 | ≤ 2 | yes | the durable framed fan-out (3 " \
           "servers that fdatasync each add, nothing else): 2.67 (the limit itself misses the goal) |" in text
    assert "| paced 1,000/s: p50 ours ÷ NATS's p50 | 2.00 | ≤ 1 | **no** | the durable framed fan-out (3 servers " \
           "that fdatasync each add, nothing else): 1.50 (the limit itself misses the goal) |" in text
    assert "- 5 goals cannot be met on this machine" in text  # and both 1 MiB goals (their 3 storages)
    assert "NATS acks from the page cache" in text
    block = report.table_block(data, tables["replication"])
    assert "limit: framed fan-out to 3 servers that fdatasync each add, nothing else" in block


def test_every_goal_names_a_row_and_columns_its_table_has():
    from bench import goals
    specs = {spec.name: spec for spec in report.SPECS}
    for goal in goals.GOALS:
        spec = specs[goal.table]
        assert goal.numerator in spec.columns and goal.denominator in spec.columns, goal
        labels = [figure.label if isinstance(figure.label, str) else figure.label({name: [] for name in
                                                                                   (spec.sources or (spec.name,))})
                  for figure in spec.figures]
        assert goal.row in labels or sum(label.startswith(goal.row) for label in labels) == 1, (goal, labels)


def test_a_limit_not_measured_over_grpc_still_puts_a_goal_out_of_reach(monkeypatch):
    import dataclasses

    from bench import goals
    data = session()
    large_fanout = next(goal for goal in goals.GOALS if goal.text.startswith("1 MiB appends: ours ÷ the bare"))
    monkeypatch.setattr(goals, "GOALS", (dataclasses.replace(large_fanout, limit="floor", over_grpc=False),))
    text = report.blocks(data)["goals"]
    assert "the floor: 0.60 (the limit itself misses the goal) |" in text
    assert "- 1 goal cannot be met on this machine" in text
