"""``ledger demo`` end to end: a real subprocess with real bookies, real Spark and a real kill -9.

Each run starts the command in a session of its own, so every process it
starts (bookies, the Spark JVM, Spark's Python workers) can be found by its
session id. A full run (``--duration 40 --json``) is checked three ways: its
exit status and JSON summary (every committed event read back once, an
ensemble change that replaced the killed bookie), the metadata it leaves in
``--data-dir`` read back independently through the log layer, and the
processes: none of its session outlives it. A second run gets Ctrl-C (SIGINT
to its process group, as a terminal sends it) while it streams: it exits 130
and leaves no process behind either.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyspark_ledger.testing.spark import spark_unavailable_reason
from tests.sessions import kill_session

RUN_TIMEOUT_S = 840  # the machine is shared: Spark's warm-up alone can take a minute under load
INTERRUPT_TIMEOUT_S = 120
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT_S + 120)]


def _demo_command(data_dir: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "pyspark_ledger.cli.main", "demo", "--data-dir", str(data_dir), *flags]






def _require_spark() -> None:
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"ledger demo needs pyspark and Java: {reason}")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    _require_spark()
    data_dir = tmp_path_factory.mktemp("demo") / "cluster"
    process = subprocess.Popen(_demo_command(data_dir, "--duration", "40", "--json"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        process.kill()
        leftovers = kill_session(process.pid)
    yield process.returncode, stdout, stderr, data_dir, leftovers
    shutil.rmtree(data_dir, ignore_errors=True)  # several hundred MB of replicated entries


def test_demo_passes_its_check_and_finds_the_ensemble_change(demo_run):
    returncode, stdout, stderr, _, _ = demo_run
    assert returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-6000:]}"
    summary = json.loads(stdout)
    verdict = summary["verdict"]
    assert summary["passed"] is True and summary["problems"] == []
    assert verdict["rows_read"] == verdict["expected_rows"] == summary["rows_written"] > 0
    assert verdict["missing"] == verdict["duplicates"] == verdict["unexpected"] == verdict["altered"] == 0
    assert summary["micro_batches"] >= 1
    stream = summary["stream"]
    assert stream["ledgers"] >= 2 and stream["bytes"] == summary["bytes_written"] > 0
    kill = summary["kill"]
    assert kill is not None and summary["bookies"] == 4 and summary["bookies_alive_at_end"] == 3
    # the kill landed on a ledger begun while the bookie was paused and still being written, so that ledger's
    # writer certainly replaced it (demo/bookie_killer.py): a new fragment, or the first rewritten in place
    assert kill["proven"] is True and kill["ledger_id"] is not None, kill
    assert summary["ensemble_changed"] is True
    hit = [change for change in stream["changes"] if change["ledger_id"] == kill["ledger_id"]]
    assert hit and kill["bookie_id"] in hit[0]["replaced"], (kill, stream["changes"])
    assert "CHECK PASSED" in stderr and "KILL -9" in stderr and "ensemble changes (bookie replaced" in stderr


def test_the_metadata_left_behind_shows_the_same_stream_and_change(demo_run):
    from pyspark_ledger.log import StreamClient

    _, stdout, _, data_dir, _ = demo_run
    summary = json.loads(stdout)
    with StreamClient(summary["metadata_uri"]) as streams:
        name = summary["stream"]["stream"]
        ledger_ids = [span.ledger_id for log in streams.partition_logs(name).values() for span in log.spans]
        fragments = {ledger_id: streams.client.ledger_metadata(ledger_id).fragments for ledger_id in ledger_ids}
    assert len(ledger_ids) == summary["stream"]["ledgers"]
    kill = summary["kill"]
    hit = fragments[kill["ledger_id"]]  # the ledger the kill hit, as the killer saw it then and as stored now
    assert kill["bookie_id"] in kill["ensemble"] and kill["bookie_id"] not in hit[-1].bookies
    from_seen = [fragment for fragment in hit if fragment.first_entry_id == kill["first_entry_id"]]
    assert len(hit) > 1 or tuple(from_seen[0].bookies) != tuple(kill["ensemble"])
    assert (data_dir / "demo" / "spark.log").is_file()


def test_no_process_of_the_demo_outlives_it(demo_run):
    _, stdout, _, _, leftovers = demo_run
    assert leftovers == [], f"processes of the demo's session still running after it exited: {leftovers}"
    pids = json.loads(stdout)["pids"]
    assert len(pids["bookies"]) == 4 and pids["spark_jvm"] is not None


def _wait_for_line(process: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    """Lines of ``process.stdout`` up to the first containing ``text`` (bounded wait)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline and process.poll() is None:
            if selector.select(timeout=1.0):
                line = process.stdout.readline()
                lines.append(line)
                if text in line:
                    return lines
    raise AssertionError(f"the demo never printed {text!r}; it printed:\n{''.join(lines)}")


def test_ctrl_c_while_streaming_stops_everything_and_exits_130(tmp_path):
    _require_spark()
    data_dir = tmp_path / "cluster"
    process = subprocess.Popen(_demo_command(data_dir, "--duration", "60"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                               start_new_session=True)
    try:
        _wait_for_line(process, "the first micro-batch is writing", RUN_TIMEOUT_S)
        os.killpg(process.pid, signal.SIGINT)
        rest, _ = process.communicate(timeout=INTERRUPT_TIMEOUT_S)
    finally:
        process.kill()
        leftovers = kill_session(process.pid)
    assert process.returncode == 130, rest[-4000:]
    assert "interrupted" in rest
    assert leftovers == [], f"processes of the demo's session still running after Ctrl-C: {leftovers}"
