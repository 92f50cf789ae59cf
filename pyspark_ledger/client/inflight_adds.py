"""The adds in flight on one add stream, and whose they are: ranges of entry ids where they follow each other.

``AddStream`` must know, for every add it sent and the bookie has not answered, the listener its answer
goes to. One writer sends each ledger's entries in id order, and a bookie answers them in runs (docs/protocol.md
W9), so ``InflightAdds`` keeps them per ledger as spans ``[first, last, listener]`` in id order, ascending and
disjoint: a send of the ids that follow is one span more (or a longer last span), and a run of answers that
starts at a ledger's first span is taken from the front in one step per span. Anything else -- a send of ids
that are not the next ones (a re-send), an answer out of that order, per-add answers of a bookie that does
not send runs -- goes through ``_loose``, a dict of ``(ledger id, entry id) -> listener`` with the same
semantics the stream had before: a ledger's spans are moved into it (``_unfold``) before it is used for that
ledger, and new spans are made only while it is empty, so every add in flight is in exactly one of the two.

The work of one call is bounded by the adds it names that are in flight plus the spans it touches (the stream
rejects runs that hold more entries than are in flight before they get here). Not thread-safe: the stream
calls it under its lock.
"""
from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import Iterable

__all__ = ["InflightAdds"]


class InflightAdds:
    """Adds in flight: ``(ledger id, entry id) -> listener``, kept as spans where ids follow (module docstring)."""

    __slots__ = ("_spans", "_loose", "_in_spans", "_spare")

    def __init__(self) -> None:
        self._spans: dict[int, deque[list]] = {}  # ledger id -> [first, last, listener], ascending, disjoint
        self._loose: dict[tuple[int, int], object] = {}
        self._in_spans = 0
        self._spare: deque[list] | None = None  # a ledger's spans emptied, kept for the next: a paced add's
        # answer empties them and the next add fills them again (no deque made and dropped per add)

    def __len__(self) -> int:
        return self._in_spans + len(self._loose)

    def add(self, ledger_id: int, entry_ids: list[int], listener: object) -> int | None:
        """Register ``entry_ids`` of ``ledger_id`` for ``listener``; None, or (nothing registered) an id that is
        already in flight or twice in ``entry_ids``."""
        count = len(entry_ids)
        if not count:
            return None
        first = entry_ids[0]
        spans = self._spans.get(ledger_id)
        if not self._loose and (not spans or spans[-1][1] < first) and entry_ids == list(range(first, first + count)):
            last = first + count - 1
            if not spans:
                spans, self._spare = deque() if self._spare is None else self._spare, None
                spans.append([first, last, listener])
                self._spans[ledger_id] = spans
            elif spans[-1][1] + 1 == first and spans[-1][2] is listener:
                spans[-1][1] = last
            else:
                spans.append([first, last, listener])
            self._in_spans += count
            return None
        self._unfold(ledger_id)
        loose = self._loose
        keys = list(zip(repeat(ledger_id), entry_ids))
        if not loose.keys().isdisjoint(keys):
            return next(key[1] for key in keys if key in loose)
        size = len(loose)
        loose.update(dict.fromkeys(keys, listener))
        if len(loose) != size + count:  # an entry twice in this send: none of them is registered
            for key in keys:
                loose.pop(key, None)
            seen: set[int] = set()
            return next(entry_id for entry_id in entry_ids if entry_id in seen or seen.add(entry_id))
        return None

    def pop_run(self, ledger_id: int, first: int, last: int) -> list[tuple[object, range]]:
        """Take the adds ``first..last`` of ``ledger_id`` that are in flight: ``(listener, range of ids)`` pieces
        in id order, one per change of listener (ids not in flight are left out)."""
        pieces: list[tuple[object, range]] = []
        spans = self._spans.get(ledger_id)
        at = first
        while spans and spans[0][0] == at and at <= last:  # nearly always: the run starts at the front
            span = spans[0]
            end = min(last, span[1])
            if pieces and pieces[-1][0] is span[2]:
                pieces[-1] = (span[2], range(pieces[-1][1].start, end + 1))
            else:
                pieces.append((span[2], range(at, end + 1)))
            self._in_spans -= end - at + 1
            if end == span[1]:
                spans.popleft()
            else:
                span[0] = end + 1
            at = end + 1
        if spans is not None and not spans:
            self._spare = self._spans.pop(ledger_id)
        if at <= last:
            self._unfold(ledger_id)
            pieces.extend(self._pop_loose(ledger_id, range(at, last + 1)))
        return pieces

    def pop_keys(self, keys: list[tuple[int, int]]) -> list:
        """Take each ``(ledger id, entry id)``: its listener, or None if it is not in flight (per-add answers)."""
        if self._spans:
            for ledger_id in {key[0] for key in keys}:
                self._unfold(ledger_id)
        return list(map(self._loose.pop, keys, repeat(None)))

    def take_all(self) -> list[tuple[tuple[int, int], object]]:
        """Every add in flight, ``((ledger id, entry id), listener)``; none is left."""
        taken = list(self._loose.items())
        for ledger_id, spans in self._spans.items():
            for first, last, listener in spans:
                taken.extend(zip(zip(repeat(ledger_id), range(first, last + 1)), repeat(listener)))
        self._spans, self._loose, self._in_spans = {}, {}, 0
        return taken

    def _unfold(self, ledger_id: int) -> None:
        """Move the ledger's spans into ``_loose``."""
        spans = self._spans.pop(ledger_id, None)
        if spans is None:
            return
        loose = self._loose
        for first, last, listener in spans:
            loose.update(dict.fromkeys(zip(repeat(ledger_id), range(first, last + 1)), listener))
            self._in_spans -= last - first + 1

    def _pop_loose(self, ledger_id: int, entry_ids: range) -> Iterable[tuple[object, range]]:
        listeners = list(map(self._loose.pop, zip(repeat(ledger_id), entry_ids), repeat(None)))
        start = 0
        for index in range(1, len(listeners) + 1):  # split where the adds' listener changes
            if index == len(listeners) or listeners[index] is not listeners[start]:
                if listeners[start] is not None:
                    yield listeners[start], entry_ids[start:index]
                start = index
