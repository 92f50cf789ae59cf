"""Change notification for the ZooKeeper backend, over one-shot znode watches.

A watch reads a baseline when created and then reports only changes after
it: a ZooKeeper event (or a reconnect, since watches die with a session)
schedules a refresh on the session's task thread, which reads the current
state, sets the next one-shot watch and calls back if the state differs from
the last one reported. Several changes between two refreshes are coalesced
into one callback with the latest state, as with the SQLite poller.
"""
from __future__ import annotations

import abc
import logging
import threading
from typing import Callable

from kazoo.protocol.states import EventType, WatchedEvent

from pyspark_ledger.errors import MetadataError, NoSuchLedgerError
from pyspark_ledger.metadata import layout
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import BookieRegistration, Versioned, Watch
from pyspark_ledger.metadata.workers import run_callback
from pyspark_ledger.metadata.zk_registration import read_bookies
from pyspark_ledger.metadata.zk_session import ZooKeeperSession

log = logging.getLogger(__name__)
LedgerCallback = Callable[[Versioned[LedgerMetadata] | None], None]
BookiesCallback = Callable[[dict[str, BookieRegistration]], None]


class _RefreshingWatch(Watch):
    """Schedules at most one pending refresh; subclasses read and compare."""

    def __init__(self, session: ZooKeeperSession) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._state_lock = threading.Lock()  # orders the baseline before every refresh
        self._pending = False
        self._cancelled = False

    def start(self) -> "_RefreshingWatch":
        with self._state_lock:
            self._read_baseline()
        self._session.add_reconnect_hook(self._schedule)
        return self

    def cancel(self) -> None:
        self._cancelled = True
        self._session.remove_reconnect_hook(self._schedule)

    def _on_event(self, event: WatchedEvent) -> None:
        # kazoo's callback thread; NONE events mean "connection lost": the reconnect hook refreshes.
        if event.type != EventType.NONE:
            self._schedule()

    def _schedule(self) -> None:
        with self._lock:
            if self._pending or self._cancelled:
                return
            self._pending = True
        self._session.tasks.submit(self._run)

    def _run(self) -> None:
        with self._lock:
            self._pending = False
        with self._state_lock:
            if not self._cancelled:
                self._refresh()

    @abc.abstractmethod
    def _read_baseline(self) -> None:
        """Read the watched value (and set the watch) before any callback: what later changes compare to."""

    @abc.abstractmethod
    def _refresh(self) -> None:
        """Re-read the value (re-arming the watch) and call back if it changed."""


class ZooKeeperLedgerWatch(_RefreshingWatch):
    """Calls back with the ledger's new metadata, or None once deleted."""

    def __init__(self, session: ZooKeeperSession, ledger_id: int, callback: LedgerCallback) -> None:
        super().__init__(session)
        self._ledger_id = ledger_id
        self._path = layout.ledger_path(ledger_id)
        self._callback = callback
        self._last: tuple[int, int] | None = None

    def _read_baseline(self) -> None:
        stat = self._session.call(f"watch ledger {self._ledger_id}",
                                  self._session.client.exists_async, self._path, watch=self._on_event)
        self._last = _identity(stat)

    def _refresh(self) -> None:
        data, stat = self._read()
        identity = _identity(stat)
        if identity == self._last or self._cancelled:
            return
        self._last = identity
        if stat is None:
            run_callback(self._callback, None, what=f"ledger {self._ledger_id} watch")
            return
        try:
            value = Versioned(LedgerMetadata.from_json(data), stat.version)
        except MetadataError:
            log.exception("ledger %d watch: stored metadata is unreadable", self._ledger_id)
            return
        run_callback(self._callback, value, what=f"ledger {self._ledger_id} watch")

    def _read(self):
        """(data, stat) with a watch set, or (None, None) if absent (exists-watch set)."""
        what = f"watch ledger {self._ledger_id}"
        client = self._session.client
        while True:
            try:
                return self._session.call(what, client.get_async, self._path, watch=self._on_event,
                                          missing=NoSuchLedgerError(self._path))
            except NoSuchLedgerError:
                stat = self._session.call(what, client.exists_async, self._path, watch=self._on_event)
                if stat is None:
                    return None, None
                # re-created between the two reads: read it again


class ZooKeeperBookiesWatch(_RefreshingWatch):
    """Calls back with the whole set whenever bookies come, go or change mode."""

    def __init__(self, session: ZooKeeperSession, callback: BookiesCallback) -> None:
        super().__init__(session)
        self._callback = callback
        self._last: dict[str, BookieRegistration] = {}

    def _read_baseline(self) -> None:
        self._last = read_bookies(self._session, watch=self._on_event)

    def _refresh(self) -> None:
        current = read_bookies(self._session, watch=self._on_event)
        if current == self._last or self._cancelled:
            return
        self._last = current
        run_callback(self._callback, dict(current), what="bookies watch")


def _identity(stat) -> tuple[int, int] | None:
    """What makes two observations of a node the same: its creation and its version."""
    return None if stat is None else (stat.czxid, stat.version)
