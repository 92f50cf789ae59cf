"""Test helpers: bounded waiting, sample metadata, child processes using a store."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from pyspark_ledger.metadata.model import Fragment, LedgerMetadata
from tests.waiting import wait_until as shared_wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, interval: float = 0.02,
               what: str = "condition") -> object:
    """``tests.waiting.wait_until`` with this package's shorter default timeout."""
    return shared_wait_until(predicate, timeout, what, interval)


def ledger(ledger_id: int, bookies: tuple[str, ...] = ("b1", "b2", "b3"), **changes) -> LedgerMetadata:
    """A valid E=3, Qw=2, Qa=2 ledger metadata record."""
    metadata = LedgerMetadata(ledger_id=ledger_id, ensemble_size=len(bookies), write_quorum=2,
                              ack_quorum=2, fragments=(Fragment(0, bookies),), ctime_ms=1_700_000_000_000)
    return metadata.with_changes(**changes) if changes else metadata


class Recorder:
    """Collects callback arguments from background threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list = []

    def __call__(self, event) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list:
        with self._lock:
            return list(self._events)

    def wait_for(self, predicate: Callable[[object], bool], what: str, timeout: float = 15.0):
        """The first recorded event matching ``predicate`` (bounded wait)."""
        matches = wait_until(lambda: [e for e in self.events if predicate(e)], timeout, what=what)
        return matches[0]


def start_child(code: str, *args: str) -> subprocess.Popen:
    """``python -c code args...`` importing this checkout; stdin kept open as a lifeline."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=REPO_ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def stop_child(child: subprocess.Popen) -> None:
    """Kill a child (if still running) and reap it."""
    if child.poll() is None:
        child.kill()
    child.wait(timeout=30)
    for stream in (child.stdin, child.stdout, child.stderr):
        with contextlib.suppress(OSError):
            stream.close()


REGISTER_AND_WAIT = """
import os, sys
from pyspark_ledger.metadata import open_metadata_store
store = open_metadata_store(sys.argv[1])
store.register_bookie(sys.argv[2], {"pid": os.getpid()})
print("registered", flush=True)
sys.stdin.read()  # stay alive until the parent closes stdin or kills us
"""

CAS_INCREMENTS = """
import sys
from pyspark_ledger.errors import MetadataVersionConflictError
from pyspark_ledger.metadata import open_metadata_store
with open_metadata_store(sys.argv[1]) as store:
    for _ in range(int(sys.argv[3])):
        while True:
            current = store.get(sys.argv[2])
            try:
                store.set(sys.argv[2], b"%d" % (int(current.value) + 1), current.version)
                break
            except MetadataVersionConflictError:
                continue
print("done", flush=True)
"""
