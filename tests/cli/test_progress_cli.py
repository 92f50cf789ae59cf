"""Long CLI work shows progress: `simpletest`, `ledgers rereplicate` and `autorecovery`, against a real sandbox.

Output that is not a terminal (here, a pipe) gets plain lines; $LEDGER_PROGRESS_EVERY_S=0 makes one per step
so that small counts show them.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

from pyspark_ledger.cli.progress import CopyProgress, ProgressBar
from tests.cli.conftest import ledger
from tests.cli.test_admin_cli import run_ledger

EVERY_STEP = {"LEDGER_PROGRESS_EVERY_S": "0"}


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def test_simpletest_shows_its_read_phase_in_lines(sandbox):
    result = run_ledger("--metadata", sandbox.metadata_uri, "--json", "simpletest", "-n", "40", "-s", "10",
                        env=EVERY_STEP)
    assert result.returncode == 0, result.stderr
    ledger_id = json.loads(result.stdout)["ledger_id"]
    reading = _lines(result.stderr, f"reading ledger {ledger_id} back: ")
    assert len(reading) >= 5, result.stderr  # periodic lines, then the closing one
    assert "40/40 entries (100%) in " in reading[-1]
    assert _lines(result.stderr, f"writing ledger {ledger_id}: ")[-1].startswith(
        f"writing ledger {ledger_id}: 40/40 entries (100%) in ")
    assert "\r" not in result.stderr, "no bar redraws outside a terminal"


def test_by_default_a_short_run_prints_only_the_closing_lines(sandbox):
    result = ledger(sandbox, "simpletest", "-n", "20", "-s", "10")
    assert result.returncode == 0, result.stderr
    assert len(_lines(result.stderr, "reading ledger ")) == 1 and len(_lines(result.stderr, "writing ledger ")) == 1


def test_a_bad_progress_interval_is_refused_before_any_ledger_is_made(sandbox, client):
    before = set(client.list_ledgers())
    result = run_ledger("--metadata", sandbox.metadata_uri, "simpletest", "-n", "5",
                        env={"LEDGER_PROGRESS_EVERY_S": "soon"})
    assert result.returncode != 0 and "LEDGER_PROGRESS_EVERY_S='soon'" in result.stderr, result.stderr
    assert set(client.list_ledgers()) == before


def test_rereplicate_all_says_when_there_is_nothing_to_do(sandbox):
    text = ledger(sandbox, "ledgers", "rereplicate", "--all", "--password", "pw")
    assert text.returncode == 0 and "nothing to re-replicate" in text.stdout, text.stderr
    assert json.loads(ledger(sandbox, "--json", "ledgers", "rereplicate", "--all", "--password", "pw").stdout) == []


def test_rereplicate_shows_the_copying_of_each_ledger(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        for index in range(30):
            writer.append(b"entry-%d" % index)
    if len(sandbox.bookie_ids) < 4:
        sandbox.add_bookie()
    drained = writer.metadata.fragments[0].bookies[0]
    moved = run_ledger("--metadata", sandbox.metadata_uri, "ledgers", "rereplicate", str(writer.ledger_id),
                       "--password", "pw", "--bookie", drained, env=EVERY_STEP)
    assert moved.returncode == 0, moved.stderr
    assert "re-replicating 1 ledger(s)" in moved.stderr
    copying = _lines(moved.stderr, f"ledger {writer.ledger_id}: copying: ")
    assert copying[0].startswith(f"ledger {writer.ledger_id}: copying: 0/30 entries (0%)"), moved.stderr
    assert "30/30 entries (100%) in " in copying[-1] and len(copying) >= 5
    assert f"{drained} -> " in moved.stdout and "30 copied" in moved.stdout


def test_autorecovery_says_once_that_there_is_nothing_to_do(sandbox):
    process = subprocess.Popen(
        [sys.executable, "-m", "pyspark_ledger.cli.main", "--metadata", sandbox.metadata_uri, "autorecovery",
         "--interval", "0.2", "--password", "pw"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "LEDGER_METADATA"})
    try:
        time.sleep(4.0)  # many rounds, all idle
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert stderr.count("auto-recovery: nothing to re-replicate now") == 1, stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_redraws_one_line_and_ends_it():
    out = _Terminal()
    bar = ProgressBar("reading", 4, out)
    for done in range(1, 5):
        bar.update(done)
    bar.finish()
    text = out.getvalue()
    assert text.startswith("\rreading [") and text.endswith("\n")
    assert text.count("\n") == 1 and "] 4/4 (" in text


def test_copy_progress_starts_a_new_bar_per_ledger_and_finishes_the_last():
    out = io.StringIO()
    progress = CopyProgress(out)
    for ledger_id in (7, 8):
        for done in range(3):
            progress(ledger_id, done, 2)
    progress.finish()
    progress.finish()
    closing = [line for line in out.getvalue().splitlines() if " in " in line]
    assert [line.split(":")[0] for line in closing] == ["ledger 7", "ledger 8"]
