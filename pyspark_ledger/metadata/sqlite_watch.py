"""Change notification for the SQLite backend: one polling thread per store.

SQLite has no watches, so a ticker thread (``?poll_interval=``) compares what
it reads with what it last reported: per watched ledger the row's ``modified``
stamp (a store-wide counter bumped by every ledger write, so a delete followed
by a re-create is seen as a change), and the live bookie set (which also
changes when a lease expires). Callbacks run on that thread and report the
latest state; several changes within one interval are coalesced, as
ZooKeeper's one-shot watches coalesce them too.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.sqlite_db import SqliteDatabase
from pyspark_ledger.metadata.store import BookieRegistration, Versioned, Watch
from pyspark_ledger.metadata.workers import TickerThread, run_callback

LedgerCallback = Callable[[Versioned[LedgerMetadata] | None], None]
BookiesCallback = Callable[[dict[str, BookieRegistration]], None]
_CHUNK = 500  # stays below SQLite's bound-parameter limit
log = logging.getLogger(__name__)


class _PolledWatch(Watch):
    def __init__(self, poller: "SqliteWatchPoller", last: object) -> None:
        self._poller = poller
        self.last = last
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._poller.forget(self)


class _LedgerWatch(_PolledWatch):
    def __init__(self, poller, ledger_id: int, callback: LedgerCallback, last: object) -> None:
        super().__init__(poller, last)
        self.ledger_id = ledger_id
        self.callback = callback


class _BookiesWatch(_PolledWatch):
    def __init__(self, poller, callback: BookiesCallback, last: object) -> None:
        super().__init__(poller, last)
        self.callback = callback


class SqliteWatchPoller:
    """Owns the polling thread and the watches it serves."""

    def __init__(self, db: SqliteDatabase, interval: float,
                 read_bookies: Callable[[], dict[str, BookieRegistration]]) -> None:
        self._db = db
        self._read_bookies = read_bookies
        self._lock = threading.Lock()
        self._watches: list[_PolledWatch] = []
        self._last_error: str | None = None
        self._ticker = TickerThread(f"metadata-poll-{db.path}", interval, self._tick)

    def watch_ledger(self, ledger_id: int, callback: LedgerCallback) -> Watch:
        rows = self._read_ledger_rows([ledger_id])
        stamp = rows[ledger_id][0] if ledger_id in rows else None
        return self._add(_LedgerWatch(self, ledger_id, callback, stamp))

    def watch_bookies(self, callback: BookiesCallback) -> Watch:
        return self._add(_BookiesWatch(self, callback, self._read_bookies()))

    def forget(self, watch: _PolledWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def close(self) -> None:
        self._ticker.close()
        with self._lock:
            self._watches.clear()

    def _add(self, watch: _PolledWatch) -> Watch:
        with self._lock:
            self._watches.append(watch)
        self._ticker.start()
        return watch

    def _tick(self) -> None:
        try:
            self._poll()
        except MetadataError as exc:  # e.g. the file was removed: said once (per message), not every tick
            if str(exc) != self._last_error:
                log.error("watches of %s stopped seeing changes: %s", self._db.uri, exc)
            self._last_error = str(exc)
            return
        self._last_error = None

    def _poll(self) -> None:
        with self._lock:
            watches = list(self._watches)
        ledger_watches = [w for w in watches if isinstance(w, _LedgerWatch)]
        if ledger_watches:
            self._poll_ledgers(ledger_watches)
        bookie_watches = [w for w in watches if isinstance(w, _BookiesWatch)]
        if bookie_watches:
            self._poll_bookies(bookie_watches)

    def _poll_ledgers(self, watches: list[_LedgerWatch]) -> None:
        rows = self._read_ledger_rows({w.ledger_id for w in watches})
        for watch in watches:
            row = rows.get(watch.ledger_id)
            stamp = row[0] if row else None
            if stamp == watch.last or watch.cancelled or self._ticker.closed:
                continue
            watch.last = stamp
            try:
                value = None if row is None else Versioned(LedgerMetadata.from_json(row[2]), row[1])
            except MetadataError:
                log.exception("ledger %d watch: stored metadata is unreadable", watch.ledger_id)
                continue
            run_callback(watch.callback, value, what=f"ledger {watch.ledger_id} watch")

    def _poll_bookies(self, watches: list[_BookiesWatch]) -> None:
        current = self._read_bookies()
        for watch in watches:
            if current == watch.last or watch.cancelled or self._ticker.closed:
                continue
            watch.last = current
            run_callback(watch.callback, dict(current), what="bookies watch")

    def _read_ledger_rows(self, ledger_ids: Iterable[int]) -> dict[int, tuple[int, int, bytes]]:
        ids = sorted(ledger_ids)
        rows: dict[int, tuple[int, int, bytes]] = {}
        with self._db.read() as conn:
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for ledger_id, modified, version, data in conn.execute(
                        f"SELECT ledger_id, modified, version, data FROM ledgers "
                        f"WHERE ledger_id IN ({marks})", chunk):
                    rows[ledger_id] = (modified, version, data)
        return rows
