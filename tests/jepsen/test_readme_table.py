"""The README's fault-suite table (issue 17 part 6; pyspark_ledger/testing/jepsen/readme_table.py): it is the one
generated from the committed docs/jepsen-results.json, that file counts no lost and no divergent entry, and a
failed schedule shows in the table with its replay command."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.faults.schedule import KILL, PAUSE, ZK_PAUSE
from pyspark_ledger.testing.jepsen import figures, readme_table

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / readme_table.RESULTS_PATH


def _run(seed: int, metadata: str = "sqlite", **changes) -> dict:
    run = {"seed": seed, "metadata": metadata, "ok": True, "seconds": 20.0, "faults": {KILL: 1, PAUSE: 2},
           "acknowledged": 1000, "lost": 0, "divergent": 0, "ledgers": 9, "failures": 0,
           "unavailability_s": {KILL: 3.25, PAUSE: 1.5}, "notes": [], "load_average": 4.0,
           "paused_writer": "stopped: LedgerFencedError: ledger 3 is CLOSED: more", "schedule": ["t+ 1s kill"]}
    return {**run, **changes}


def test_the_readme_table_is_the_one_generated_from_the_committed_results():
    document = json.loads(COMMITTED.read_text())
    text = (REPO / "README.md").read_text()
    assert readme_table.regenerate(text, document) == text, \
        "README.md's fault-suite table was edited by hand or the results changed: run " \
        "python -m pyspark_ledger.testing.jepsen.readme_table"
    assert readme_table.main(["--check"]) == 0


def test_the_committed_results_lost_nothing_and_nothing_diverged():
    document = json.loads(COMMITTED.read_text())
    assert set(document["stores"]) == {"sqlite", "zookeeper"}
    for metadata, store in document["stores"].items():
        assert store["totals"]["lost"] == 0 and store["totals"]["divergent"] == 0, metadata
        assert all(run["lost"] == 0 and run["divergent"] == 0 for run in store["runs"]), metadata
        assert store["totals"] == figures.summarize(store["runs"])  # the totals are those of the runs kept
        assert store["seeds"] == [run["seed"] for run in store["runs"]]


def test_the_table_names_its_runs_and_shows_failed_schedules():
    runs = [_run(1), _run(2, unavailability_s={KILL: 7.0}), _run(3, ok=False, divergent=2, failures=1),
            _run(4, notes=["not every bookie was writable again within 60 s after healing"]),
            _run(1, "zookeeper", faults={ZK_PAUSE: 1}, unavailability_s={ZK_PAUSE: 9.5})]
    document = readme_table.results_document(runs, "0123456789abcdef", "2026-11-26")
    assert document["stores"]["sqlite"]["runs"][0]["paused_writer"] == "stopped: LedgerFencedError"
    assert "schedule" not in document["stores"]["sqlite"]["runs"][0]  # the seed replays it; the file stays small
    table = readme_table.render(document)
    assert "commit 0123456789 on 2026-11-26, seeds 1–4 (SQLite) and 1 (ZooKeeper)" in table
    assert "load average 4.00–4.00 (median 4.00)" in table
    assert "| schedules failed | 2 | 0 |" in table
    assert "| divergent: acknowledged past a ledger's end, or readers disagreeing (must be 0) | 2 | 0 |" in table
    assert "| `kill` | 4 | 0 | 7.0 s (seed 2) | — |" in table
    assert "| `zk-pause` | 0 | 1 | — | 9.5 s (seed 1) |" in table
    assert "**2 schedule(s) failed**" in table
    assert "SQLite seed 4: 0 failed check(s), lost 0, divergent 0; not every bookie was writable again within 60 s " \
        "after healing; replay: `LEDGER_JEPSEN_SEED=4 LEDGER_JEPSEN_METADATA=sqlite python3" in table  # its test failed
    replay = readme_table.replay_command(3, "sqlite")
    assert f"SQLite seed 3: 1 failed check(s), lost 0, divergent 2; replay: `{replay}`" in table
    assert "(SQLite)" in readme_table.render(readme_table.results_document(runs[:2], "c", "d", load="1–2"))


def test_only_the_marked_block_changes(tmp_path):
    text = "Before.\n<!-- jepsen-table -->\nold\n<!-- /jepsen-table -->\nAfter.\n"
    document = readme_table.results_document([_run(1)], "c", "d")
    fresh = readme_table.regenerate(text, document)
    assert fresh == f"Before.\n<!-- jepsen-table -->\n{readme_table.render(document)}\n<!-- /jepsen-table -->\nAfter.\n"
    assert readme_table.regenerate(fresh, document) == fresh
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        readme_table.regenerate("no markers", document)


def test_the_command_writes_the_results_file_and_the_table(tmp_path):
    runs_dir, readme, results = tmp_path / "runs", tmp_path / "README.md", tmp_path / "results.json"
    for seed in (1, 2, 4):
        figures.write(runs_dir / f"run-sqlite-{seed}.json", _run(seed))
    figures.write(runs_dir / "summary.json", {"not": "a run"})
    readme.write_text("x\n<!-- jepsen-table -->\n<!-- /jepsen-table -->\n")
    options = ["--readme", str(readme), "--results", str(results)]
    assert readme_table.main([str(runs_dir), "--commit", "abc", *options]) == 0
    assert json.loads(results.read_text())["stores"]["sqlite"]["seeds"] == [1, 2, 4]
    assert "seeds 1–2, 4 (SQLite)" in readme.read_text()
    assert readme_table.main(["--check", *options]) == 0
    readme.write_text(readme.read_text().replace("| 3,000 |", "| 3,001 |"))
    assert readme_table.main(["--check", *options]) == 1
    for wrong in (["--check", "--readme", str(readme), "--results", str(tmp_path / "none.json")],
                  ["--check", str(runs_dir), *options]):
        with pytest.raises(SystemExit):
            readme_table.main(wrong)


@pytest.mark.parametrize("runs, words", [
    ([], "no runs"), ([_run(1, "etcd")], "etcd"), ([_run(1), _run(1)], "twice")])
def test_bad_runs_are_refused(runs, words):
    with pytest.raises(InvalidArgumentError, match=words):
        readme_table.results_document(runs, "c", "d")


def test_seed_ranges():
    assert readme_table.seed_ranges([3, 1, 2, 7, 9, 10]) == "1–3, 7, 9–10"
    assert readme_table.seed_ranges([]) == ""
