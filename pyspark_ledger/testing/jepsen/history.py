"""The history of a Jepsen-style run: every client operation as an invocation and its completion.

An operation is invoked (``invoke``) and then completes exactly once: ``ok`` (it took effect), ``fail``
(it certainly did not) or ``unknown`` (it may or may not have: a timeout, a process that vanished).
Each event carries the time of ``time.monotonic()`` (CLOCK_MONOTONIC, the same in every process of
the machine, so histories written by writer subprocesses merge with the runner's), the process
that ran it, the ledger id, the entry id (known once an add is ok) and a digest of the payload.
A history is saved as JSON lines and loaded back; pure code, no I/O beyond that file.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

from pyspark_ledger.errors import InvalidArgumentError

INVOKE, OK, FAIL, UNKNOWN = "invoke", "ok", "fail", "unknown"
KINDS = (INVOKE, OK, FAIL, UNKNOWN)
ACTIONS = ("create", "add", "close", "recover", "read")
MAX_DETAIL = 300
MAX_EVENTS = 5_000_000


def digest(payload: bytes) -> str:
    """The digest a history keeps of a payload (16 hex digits of its SHA-256)."""
    return hashlib.sha256(payload).hexdigest()[:16]


@dataclass(frozen=True)
class Event:
    op_id: str            # the same for an invocation and its completion
    kind: str             # invoke | ok | fail | unknown
    action: str           # create | add | close | recover | read
    process: str          # who ran it ("w3", "recoverer", ...)
    time: float           # time.monotonic()
    ledger_id: int | None = None
    entry_id: int | None = None
    digest: str | None = None
    detail: str = ""

    def line(self) -> str:
        """One readable line: time, process, kind, action, ledger/entry, digest, detail."""
        where = "" if self.ledger_id is None else f" L{self.ledger_id}"
        where += "" if self.entry_id is None else f"/E{self.entry_id}"
        payload = f" {self.digest}" if self.digest else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.time:14.3f} {self.process:>10} {self.kind:<7} {self.action}{where}{payload}{detail}"


class History:
    """A thread-safe, append-only list of events (at most ``MAX_EVENTS``)."""

    def __init__(self, events: Iterable[Event] = (), prefix: str = "", sink=None) -> None:
        self._events: list[Event] = list(events)
        self._sink = sink  # an open text file: every event is also written there at once (JSON lines)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._prefix = prefix or f"p{os.getpid()}-"
        self._open: dict[str, Event] = {}

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def _add(self, event: Event) -> Event:
        if event.kind not in KINDS or event.action not in ACTIONS:
            raise InvalidArgumentError(f"unknown event kind or action: {event.kind!r} {event.action!r}")
        with self._lock:
            if len(self._events) >= MAX_EVENTS:
                raise InvalidArgumentError(f"a history holds at most {MAX_EVENTS} events")
            self._events.append(event)
            if self._sink is not None:
                self._sink.write(json.dumps(asdict(event), sort_keys=True) + "\n")
                self._sink.flush()
        return event

    def invoke(self, process: str, action: str, ledger_id: int | None = None, payload: bytes | None = None,
               detail: str = "") -> str:
        """Record an invocation; returns its op id, for the completion."""
        op_id = f"{self._prefix}{next(self._ids)}"
        event = Event(op_id, INVOKE, action, process, time.monotonic(), ledger_id,
                      digest=None if payload is None else digest(payload), detail=detail[:MAX_DETAIL])
        with self._lock:
            self._open[op_id] = event
        self._add(event)
        return op_id

    def complete(self, op_id: str, kind: str, *, ledger_id: int | None = None, entry_id: int | None = None,
                 detail: str = "") -> Event:
        """Record the completion (ok, fail, unknown) of an invoked operation."""
        with self._lock:
            invoked = self._open.pop(op_id, None)
        if invoked is None:
            raise InvalidArgumentError(f"operation {op_id!r} was not invoked, or already completed")
        return self._add(Event(op_id, kind, invoked.action, invoked.process, time.monotonic(),
                               invoked.ledger_id if ledger_id is None else ledger_id, entry_id, invoked.digest,
                               detail[:MAX_DETAIL]))

    def ok(self, op_id: str, **fields) -> Event:
        return self.complete(op_id, OK, **fields)

    def fail(self, op_id: str, error: BaseException | str = "", **fields) -> Event:
        return self.complete(op_id, FAIL, detail=_describe(error), **fields)

    def unknown(self, op_id: str, error: BaseException | str = "", **fields) -> Event:
        return self.complete(op_id, UNKNOWN, detail=_describe(error), **fields)

    def close_open(self, detail: str = "never completed") -> int:
        """Complete every operation still open as unknown (a process that vanished); returns how many."""
        with self._lock:
            pending = list(self._open)
        for op_id in pending:
            self.unknown(op_id, detail)
        return len(pending)

    # --- files ----------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as handle:
            for event in self:
                handle.write(json.dumps(asdict(event), sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        events = []
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    events.append(Event(**json.loads(line)))
                except (ValueError, TypeError) as exc:  # a torn last line of a killed writer is dropped
                    if handle.read().strip():
                        raise InvalidArgumentError(f"{path} line {number} is not a history event: {exc}") from exc
        return cls(events)

    @classmethod
    def merge(cls, histories: Iterable["History"]) -> "History":
        """One history of several, ordered by time."""
        return cls(sorted((event for history in histories for event in history), key=lambda e: e.time))


def _describe(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"[:MAX_DETAIL]
    return str(error)[:MAX_DETAIL]


def path_of(directory: str | os.PathLike, process: str) -> Path:
    """Where the process ``process`` of a run keeps its history."""
    return Path(directory) / f"history-{process}.jsonl"
