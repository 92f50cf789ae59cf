"""Helpers for sandbox tests: the `ledger sandbox` command as a child process, entries written to bookies."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from pyspark_ledger.client import BookieClient
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import MetadataExistsError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.model import Fragment, LedgerMetadata, master_key_check

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY = master_key(b"sandbox")
CODEC = EntryCodec()
BOOKIE_UP = re.compile(r"^bookie (\d+) up: (\S+) \(pid (\d+),")
URI_LINE = re.compile(r"metadataServiceUri = (\S+)")
READY_LINE = "Press Ctrl-C to stop."
TIMEOUT_S = 60.0


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_METADATA"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_ledger(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`ledger ARGS` to completion, output captured."""
    return subprocess.run([sys.executable, "-m", "pyspark_ledger.cli.main", *args], capture_output=True,
                          text=True, env=child_env(**env), cwd=REPO_ROOT, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def listed_bookies(uri: str) -> list[str]:
    listed = run_ledger("--metadata", uri, "--json", "bookies")
    assert listed.returncode == 0, listed.stderr
    return [row["bookie_id"] for row in json.loads(listed.stdout)]


def wait_until(predicate: Callable[[], object], what: str, timeout: float = TIMEOUT_S) -> object:
    """Poll until ``predicate()`` is truthy; fail the test naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return value


def bookie_alive(pid: int) -> bool:
    """True if ``pid`` is a live (not zombie) bookie server process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"bookie_server" in cmdline and state != "Z"


class SandboxCommand:
    """`ledger sandbox ARGS` running in the background; its output is collected line by line."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pyspark_ledger.cli.main", "sandbox", *args], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=child_env(), cwd=REPO_ROOT)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="sandbox-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for_line(self, text: str, timeout: float = TIMEOUT_S) -> str:
        """The first output line containing ``text``; fails if the command exits or times out first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if text in line), None)
                if found is not None:
                    return found
                if self.process.poll() is not None and not self._reader.is_alive():
                    pytest.fail(f"sandbox exited ({self.process.returncode}) before printing {text!r}:\n"
                                f"{chr(10).join(self.lines)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"sandbox did not print {text!r} within {timeout:.0f} s:\n{chr(10).join(self.lines)}")
                self._changed.wait(0.1)

    def wait_ready(self) -> "SandboxCommand":
        self.wait_for_line(READY_LINE)
        return self

    @property
    def metadata_uri(self) -> str:
        return URI_LINE.search(self.output).group(1)

    @property
    def bookies(self) -> list[tuple[str, int]]:
        """(bookie id, pid) of every bookie reported up, in order."""
        found = (BOOKIE_UP.match(line) for line in self.lines)
        return [(match.group(2), int(match.group(3))) for match in found if match]

    def send(self, signum: int) -> int:
        """Send ``signum`` and wait for the exit status."""
        self.process.send_signal(signum)
        status = self.process.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        return status

    def close(self) -> None:
        """Teardown: stop the sandbox, then kill any bookie it left behind."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for _bookie_id, pid in self.bookies:
            if bookie_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._reader.join(TIMEOUT_S)
        self.process.stdout.close()


@pytest.fixture
def sandbox_command():
    """Factory for background `ledger sandbox` runs; all stopped at teardown."""
    started: list[SandboxCommand] = []

    def factory(*args: str) -> SandboxCommand:
        command = SandboxCommand(*args)
        started.append(command)
        return command

    try:
        yield factory
    finally:
        for command in started:
            command.close()


def payload(bookie_id: str, entry_id: int) -> bytes:
    return f"entry {entry_id} kept by {bookie_id}".encode()


def write_entries(bookie_id: str, ledger_id: int, count: int, metadata_uri: str) -> None:
    """Add entries 0..count-1 of ``ledger_id`` to one bookie and check each was acknowledged (the ledger gets
    metadata first: a bookie creates no ledger its metadata store lacks)."""
    with open_metadata_store(metadata_uri) as store:
        try:
            store.create_ledger(LedgerMetadata(ledger_id, 1, 1, 1, (Fragment(0, (bookie_id,)),),
                                               master_key_check=master_key_check(KEY)))
        except MetadataExistsError:
            pass
    with BookieClient(bookie_id, timeout=30.0) as client, client.add_stream() as stream:
        futures = [stream.add(ledger_id, entry_id, KEY, _encoded(bookie_id, ledger_id, entry_id))
                   for entry_id in range(count)]
        assert all(future.result(30).ok for future in futures)


def read_payloads(bookie_id: str, ledger_id: int, count: int) -> list[bytes]:
    """Read entries 0..count-1 back from one bookie and decode their payloads."""
    with BookieClient(bookie_id, timeout=30.0) as client:
        result = client.read(ledger_id, 0, count - 1, master_key=KEY)
    assert result.ok, result.message
    return [CODEC.decode(body, ledger_id, entry_id).payload for entry_id, body in result.entries]


def _encoded(bookie_id: str, ledger_id: int, entry_id: int) -> bytes:
    return CODEC.encode(ledger_id, entry_id, entry_id - 1, 0, payload(bookie_id, entry_id))
