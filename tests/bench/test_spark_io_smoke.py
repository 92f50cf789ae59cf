"""A small real run of ``bench/spark_io.py`` (Spark local mode, 3 bookie processes, parquet, the in-memory
Arrow source and the limits' servers), as ``python -m bench`` runs it: a child process in its own process group
writing its JSON. About a minute here, most of it Spark's start-up."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import stop_group

ROOT = Path(__file__).resolve().parents[2]
ROWS = 2_000


def test_every_path_reports_its_first_run_apart_from_its_timed_runs(tmp_path):
    pytest.importorskip("pyspark.sql.datasource")
    out = tmp_path / "spark_io.json"
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / "spark_io.py"), "--rows", str(ROWS),
                                "--read-repeats", "2", "--write-repeats", "1", "--limit-repeats", "1",
                                "--fanout-seconds", "1", "--out", str(out)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=600)
    finally:
        stop_group(process)  # Spark, the bookies and the limits' servers, if it did not finish
    assert process.returncode == 0, stderr[-2000:]
    result = json.loads(out.read_text())
    reads = [result["parquet"]["read"], result["ledger"]["read"], result["arrow_memory"]["read"],
             result["arrow_memory"]["read_string"]]
    writes = [result["parquet"]["write"], result["ledger"]["write"], result["arrow_memory"]["write"]]
    for figures in reads + writes:
        assert figures["first_run"]["seconds"] > 0 and figures["seconds"] > 0
    for figures in reads:  # the median of the 2 timed runs, the first run outside them
        assert len(figures["runs"]) == 2 and figures["seconds"] in figures["runs"]
    assert all("runs" not in figures for figures in writes)  # one timed write each
    ledger = result["ledger"]
    assert ledger["entries"] > 0 and ledger["entry_bytes"] > ROWS * 100
    # the bookies sent each read, the first run's included, the stream's bytes once (not a third more, not less)
    assert 0.95 <= result["ratios"]["ledger_read_bookie_bytes_per_entry_byte"] < 1.3
    assert result["limits"]["read"]["seconds"] > 0 and result["limits"]["write"]["seconds"] > 0
