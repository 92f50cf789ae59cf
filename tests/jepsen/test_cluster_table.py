"""The README's table of the fault runs on the namespace cluster (``jepsen.cluster_table``): in step with the
committed results file, which counts nothing lost, divergent or written twice; failed runs named with their seed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.jepsen import cluster_table

ROOT = Path(__file__).resolve().parents[2]


def committed() -> dict:
    return json.loads((ROOT / cluster_table.RESULTS_PATH).read_text())


def test_the_readme_table_is_the_one_generated_from_the_committed_file():
    text = (ROOT / "README.md").read_text()
    assert cluster_table.regenerate(text, committed()) == text, \
        "README.md's cluster fault table is stale: run python -m pyspark_ledger.testing.jepsen.cluster_table"


def test_the_committed_runs_lost_nothing_and_wrote_nothing_twice():
    groups = committed()["groups"]
    assert groups, "no cluster runs committed"
    for group in groups.values():
        for run in group["runs"]:
            assert run["ok"] and run.get("lost", 0) == 0 and run.get("divergent", 0) == 0, run
            assert run.get("duplicated", 0) == 0, run


def run_file(directory: Path, name: str, seed: int, **figures) -> None:
    run = {"seed": seed, "ok": True, "notes": [], "acknowledged": 100, "lost": 0, "divergent": 0,
           "faults": {"kill": 1}, "unavailability_s": {"kill": 2.5}, "load_average": 3.0, **figures}
    (directory / f"{name}{seed}.json").write_text(json.dumps(run))


def test_runs_merge_by_group_and_a_failed_run_is_named_with_its_replay_command(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    run_file(first, "run-netns-", 1)
    run_file(first, "run-spark-netns-", 1, duplicated=0, restarts=1)
    run_file(second, "run-spark-netns-", 2, ok=False, duplicated=7, restarts=0)
    document = cluster_table.merge(None, first, "a" * 40, "2026-11-26")
    document = cluster_table.merge(document, second, "b" * 40, "2026-11-27")
    assert document["groups"]["writers"]["commit"] == "a" * 40  # untouched by the second directory
    assert [run["seed"] for run in document["groups"]["spark"]["runs"]] == [2]
    text = cluster_table.render(document)
    assert "| rows written twice (must be 0) | — | 7 |" in text
    assert "**1 schedule(s) failed**" in text and "LEDGER_JEPSEN_SEED=2" in text
    assert "test_cluster_spark_faults.py" in text
    with pytest.raises(InvalidArgumentError):
        cluster_table.merge(None, tmp_path, "c" * 40, "2026-11-26")  # no run files
    with pytest.raises(InvalidArgumentError):
        cluster_table.regenerate("no markers", document)
