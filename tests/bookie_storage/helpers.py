"""Helpers of the storage crash tests: the child process runner and journal inspection."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from bookie_server.journal import journal_files
from bookie_server.journal_format import JournalRecord, parse_record

REPO_ROOT = Path(__file__).resolve().parents[2]


class ChildResult:
    def __init__(self, returncode: int, lines: list[str]) -> None:
        self.returncode = returncode
        self.acks = {tuple(map(int, line.split()[1:])) for line in lines if line.startswith("ack ")}
        self.fenced = {int(line.split()[1]) for line in lines if line.startswith("fenced ")}
        self.deleted = {int(line.split()[1]) for line in lines if line.startswith("deleted ")}
        self.logs_removed_by_churn = sum(int(line.split()[2]) for line in lines if line.startswith("churned "))
        self.ready = "ready" in lines


def _command(mode: str, directory: Path, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "tests.bookie_storage.storage_child", mode, str(directory), *args]


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.pop("BOOKIE_CRASH_POINT", None)
    env.update(extra or {})
    return env


def run_child(directory: Path, *args: str, env: dict[str, str] | None = None,
              crash_expected: bool = False) -> ChildResult:
    """Run the child in ``write`` mode to completion (it exits by itself). ``crash_expected``: it must end
    at its crash point (exit 137) before it reports ready."""
    done = subprocess.run(_command("write", directory, list(args)), cwd=REPO_ROOT, env=_env(env),
                          capture_output=True, text=True, timeout=120)
    result = ChildResult(done.returncode, done.stdout.splitlines())
    if crash_expected:
        assert done.returncode == 137 and not result.ready, \
            f"child did not reach its crash point (exit {done.returncode}): {done.stderr[-3000:]}"
    else:
        assert result.ready, f"child failed (exit {done.returncode}): {done.stderr[-3000:]}"
    return result


def stream_then_kill(directory: Path, min_acks: int, *args: str, min_churn: int = 0) -> ChildResult:
    """Run the child in ``stream`` mode, kill -9 it once it reported ``min_acks`` acks (and ``min_churn``
    garbage collection rounds), collect every ack."""
    process = subprocess.Popen(_command("stream", directory, list(args)), cwd=REPO_ROOT, env=_env(None),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output = b""
    try:
        deadline = time.monotonic() + 120
        while output.count(b"ack ") < min_acks or output.count(b"churned ") < min_churn:
            assert time.monotonic() < deadline, "child reported too few acks in time"
            readable, _, _ = select.select([process.stdout], [], [], 1.0)
            if readable:
                chunk = os.read(process.stdout.fileno(), 65536)
                assert chunk, f"child exited early: {process.stderr.read().decode()[-3000:]}"
                output += chunk
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        output += process.stdout.read()  # acks written before the kill are still in the pipe
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
    lines = output.decode().splitlines()
    complete = lines if output.endswith(b"\n") else lines[:-1]
    return ChildResult(process.returncode, complete)


def journal_records(directory: Path) -> list[tuple[Path, int, JournalRecord]]:
    """Every (file, offset, record) of the journal, parsed with the journal's own format (a running or killed
    journal's file ends with preallocated zeros: ``journal_preallocate_bytes``)."""
    found = []
    for _, path in journal_files(directory / "journal"):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            if not data[offset:].strip(b"\0"):
                break
            record = parse_record(data, offset, len(data))
            assert isinstance(record, JournalRecord), f"{path}@{offset}: {record}"
            found.append((path, offset, record))
            offset = record.end
    return found


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        value = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([value ^ 0xFF]))
