"""Adds on their way to the add streams from threads other than the network thread, handed over there in batches.

Writers send from the network thread, which owns their state
(``add_bookkeeping.WriterOwner``): ``GrpcTransport.send_adds`` puts those adds
straight into the bookie's ``AddStream``. Adds sent from any other thread
(tools, the fan-out benchmark) come here: handing each straight to its
bookie's ``AddStream`` would cost a stream lookup, the stream's lock, its
checks and a wake-up of the network loop per call. ``AddOutbox.put``
instead appends the adds to a list per (bookie, ledger, listener) under one
lock and kicks the loop once while the outbox is not empty; ``flush`` (on the
loop) passes each list to its stream in one ``send``. Entries keep their
order per bookie and ledger. The hop through the loop also coalesces: adds
queued while the loop is busy reach each stream together and leave as fewer,
larger AddBatches.

A bookie that cannot be reached (no registration, its stream ended twice)
is reported to the listener's ``on_add_failure`` with the adds' keys, as a
stream that breaks is, so the writer treats it as that bookie's failure.
``close`` fails whatever is still queued the same way.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from pyspark_ledger.client.add_listeners import AddListener
from pyspark_ledger.client.io_loop import IoLoop
from pyspark_ledger.errors import BookieError, BookieUnavailableError
from pyspark_ledger.status import BookieStatus

log = logging.getLogger(__name__)
SendNow = Callable[[str, int, Sequence[tuple[int, bytes]], AddListener], None]


class AddOutbox:
    """Per-(bookie, ledger, listener) lists of adds, flushed on ``io_loop`` by ``send_now``."""

    def __init__(self, io_loop: IoLoop, send_now: SendNow) -> None:
        self._io = io_loop
        self._send_now = send_now
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, int, int], tuple[AddListener, list]] = {}
        self._closed = False

    def put(self, bookie_id: str, ledger_id: int, adds: Sequence[tuple[int, bytes]], listener: AddListener) -> None:
        """Queue ``(entry id, encoded add)`` pairs; BookieUnavailableError once closed (nothing queued)."""
        key = (bookie_id, ledger_id, id(listener))
        with self._lock:
            if self._closed:
                raise BookieUnavailableError(f"adds to bookie {bookie_id}: the client is closed",
                                             bookie_id=bookie_id, status=BookieStatus.CLOSED)
            kick = not self._queued
            queued = self._queued.get(key)
            if queued is None:
                self._queued[key] = (listener, list(adds))
            else:
                queued[1].extend(adds)
        if kick:
            self._io.kick(id(self), self.flush)

    def put_all(self, bookie_ids: Sequence[str], ledger_id: int, adds: Sequence[tuple[int, bytes]],
                listener: AddListener) -> list[tuple[str, BookieError]]:
        """``put`` to each bookie under one lock; once closed, nothing is queued and every bookie is
        returned with its error (a writer's hot path: one call per entry, not one per bookie)."""
        listener_id = id(listener)
        with self._lock:
            if self._closed:
                return [(bookie_id, BookieUnavailableError(f"adds to bookie {bookie_id}: the client is closed",
                                                           bookie_id=bookie_id, status=BookieStatus.CLOSED))
                        for bookie_id in bookie_ids]
            queued = self._queued
            kick = not queued
            for bookie_id in bookie_ids:
                key = (bookie_id, ledger_id, listener_id)
                entry = queued.get(key)
                if entry is None:
                    queued[key] = (listener, list(adds))
                else:
                    entry[1].extend(adds)
        if kick:
            self._io.kick(id(self), self.flush)
        return []

    def flush(self) -> None:
        """Hand every queued list to its stream (runs on the network loop)."""
        with self._lock:
            queued, self._queued = self._queued, {}
        for (bookie_id, ledger_id, _), (listener, adds) in queued.items():
            try:
                self._send_now(bookie_id, ledger_id, adds, listener)
            except BookieError as exc:
                _fail(listener, bookie_id, ledger_id, adds, exc)

    def close(self) -> None:
        """Refuse new adds and fail the queued ones (their writers see the bookie fail)."""
        with self._lock:
            self._closed = True
            queued, self._queued = self._queued, {}
        for (bookie_id, ledger_id, _), (listener, adds) in queued.items():
            error = BookieUnavailableError(f"adds to bookie {bookie_id}: the client was closed before they were "
                                           "sent", bookie_id=bookie_id, status=BookieStatus.CLOSED)
            _fail(listener, bookie_id, ledger_id, adds, error)


def _fail(listener: AddListener, bookie_id: str, ledger_id: int, adds, error: BookieError) -> None:
    try:
        listener.on_add_failure(bookie_id, [(ledger_id, entry_id) for entry_id, _ in adds], error)
    except Exception:  # noqa: BLE001 - a listener's bug must not stop the other lists
        log.exception("add listener %r failed", listener)
