"""The answer side of one add stream: the adds in flight, whose they are, and the answers that take them off.

``AddStream`` registers each add it queues here (``register``, under the stream's lock) and hands every
AddResultBatch the bookie sends to ``take``: its runs of OK answers (docs/protocol.md W9) first, then its
per-add results, each taken off the adds in flight with the listener that waits for it. ``deliver`` then calls
those listeners (on the loop thread, after the stream let any held batch go: docs/protocol.md W10), and
``fail`` tells each listener of the adds a broken stream leaves unanswered. Senders that wait for room
(``max_inflight`` adds unanswered) are woken as answers free it.

A run that names more entries than are in flight, or ends before it starts, is a malformed answer: BookieError,
and the stream ends.
"""
from __future__ import annotations

import threading
from operator import attrgetter
from typing import Callable, NamedTuple, Sequence

from pyspark_ledger.client.add_listeners import AddListener, acks_callback, notify
from pyspark_ledger.client.inflight_adds import InflightAdds
from pyspark_ledger.errors import BookieError
from pyspark_ledger.status import BookieStatus

__all__ = ["Answered", "StreamAnswers"]

_LEDGER_ID, _ENTRY_ID = attrgetter("ledger_id"), attrgetter("entry_id")


class Answered(NamedTuple):
    """What one AddResultBatch answered: how many adds, its runs by listener, its results with their listeners."""
    count: int
    runs: list | None  # [(listener, [(ledger id, range of entry ids)])], in the bookie's order
    results: tuple[list, list] | None  # (AddResult messages, the listener of each or None)


class StreamAnswers:
    """The adds in flight on one stream to ``bookie_id``; every method but ``take`` and ``deliver`` expects the
    stream's ``lock`` held (``take`` takes it; ``deliver`` and ``fail`` run without it)."""

    def __init__(self, bookie_id: str, lock: threading.Lock, max_inflight: int) -> None:
        self.bookie_id = bookie_id
        self._lock = lock
        self._room = threading.Condition(lock)
        self._room_waiters = 0  # senders waiting for room (answers notify only then)
        self._max_inflight = max_inflight
        self._pending = InflightAdds()  # (ledger id, entry id) -> listener, as spans of ids where they follow

    def __len__(self) -> int:
        return len(self._pending)

    def wait_for_room(self, stop: Callable[[], bool]) -> None:
        """Block while ``max_inflight`` adds are unanswered, until ``stop()`` (lock held; never on the loop
        thread, whose answers make the room)."""
        if len(self._pending) < self._max_inflight:
            return
        self._room_waiters += 1
        try:
            self._room.wait_for(lambda: len(self._pending) < self._max_inflight or stop())
        finally:
            self._room_waiters -= 1

    def wake_all(self) -> None:
        """Wake every sender waiting for room, to find the stream closing or ended (lock held)."""
        self._room.notify_all()

    def register(self, ledger_id: int, entry_ids: list[int], listener: AddListener) -> int | None:
        """Expect answers to ``entry_ids`` for ``listener`` (lock held); None, or (nothing registered) an id
        already in flight or twice in ``entry_ids``."""
        return self._pending.add(ledger_id, entry_ids, listener)

    def take(self, response) -> Answered:
        """Take one AddResultBatch's answers off the adds in flight (runs first: docs/protocol.md W9)."""
        count, runs = self._take_runs(response.acked) if response.acked else (0, None)
        results = self._take_results(response.results) if response.results else None
        return Answered(count + (len(results[0]) if results else 0), runs, results)

    def deliver(self, answered: Answered) -> None:
        """Hand what ``take`` took to the listeners (loop thread, lock not held)."""
        if answered.runs:
            self._notify_runs(answered.runs)
        if answered.results:
            self._notify_results(*answered.results)

    def take_all(self) -> InflightAdds:
        """Every add in flight, which this stream will never answer now; senders waiting for room wake (lock
        held)."""
        pending, self._pending = self._pending, InflightAdds()
        self._room.notify_all()
        return pending

    def fail(self, pending: InflightAdds, failure: BookieError) -> None:
        """Tell each listener of ``pending`` (from ``take_all``) which of its adds are left unanswered, once."""
        unanswered: dict[int, tuple[AddListener, list]] = {}
        for key, listener in pending.take_all():
            unanswered.setdefault(id(listener), (listener, []))[1].append(key)
        for listener, keys in unanswered.values():
            notify(listener.on_add_failure, self.bookie_id, keys, failure)

    def _room_freed(self) -> None:
        if self._room_waiters and len(self._pending) < self._max_inflight:
            self._room.notify_all()

    def _take_results(self, results: Sequence) -> tuple[list, list]:
        """The answers and the listeners of their adds (None where nobody awaits one on this stream), which
        leave the adds in flight."""
        results = results[:]  # a list, made without the IndexError that iterating the message's sequence ends on
        keys = list(zip(map(_LEDGER_ID, results), map(_ENTRY_ID, results)))
        with self._lock:
            listeners = self._pending.pop_keys(keys)
            self._room_freed()
        return results, listeners

    def _notify_results(self, results: list, listeners: list) -> None:
        """Hand each answer to its listener (an answer nobody awaits is dropped): the whole batch at once when
        one listener has them all (one writer: nearly always), else a list each."""
        first = listeners[0] if listeners else None
        if first is not None and listeners.count(first) == len(listeners):
            notify(first.on_add_results, self.bookie_id, results)
            return
        groups: dict[int, tuple[AddListener, list]] = {}
        for listener, result in zip(listeners, results):
            if listener is not None:
                groups.setdefault(id(listener), (listener, []))[1].append(result)
        for listener, answered in groups.values():
            notify(listener.on_add_results, self.bookie_id, answered)

    def _take_runs(self, runs: Sequence) -> tuple[int, list]:
        """How many adds runs of OK answers (docs/protocol.md W9) answer, and the runs split by the listeners of
        their adds, in order; those adds leave the adds in flight.

        BookieError (ending the stream) if the runs hold more entries than there are adds in flight."""
        bounds = []
        answered, backwards = 0, False
        for run in runs[:]:  # a list: iterating the message's own sequence ends on an IndexError made and dropped
            first, last = run.first_entry_id, run.last_entry_id
            bounds.append((run.ledger_id, first, last))
            answered += last - first + 1
            backwards = backwards or last < first
        groups: dict[int, tuple[AddListener, list]] = {}
        with self._lock:
            pending = self._pending
            if answered > len(pending) or backwards:
                raise BookieError(f"bookie {self.bookie_id} answered with runs of entries that are not in flight "
                                  f"on this stream ({len(pending)} adds are): a malformed answer",
                                  bookie_id=self.bookie_id, status=BookieStatus.RPC_FAILED)
            for ledger_id, first, last in bounds:  # each run split where its adds' listener changes
                for listener, entry_ids in pending.pop_run(ledger_id, first, last):
                    groups.setdefault(id(listener), (listener, []))[1].append((ledger_id, entry_ids))
            self._room_freed()
        return answered, list(groups.values())

    def _notify_runs(self, groups: list) -> None:
        """Hand each listener its runs, one call each."""
        for listener, spans in groups:
            notify(acks_callback(listener), self.bookie_id, spans)
