"""Which bookies a writer fails for silence: its unanswered adds per bookie, and the decision at each sweep.

docs/protocol.md W2: silence for ``add_timeout_s`` is a bookie failure, as an
error status or a broken stream is. W7: a bookie that keeps shedding load
(TOO_MANY_REQUESTS, ``add_answers.busy_retry_delay``) is failed only when an
add it shed is still unanswered ``add_timeout_s`` after its *first* send, and
then the reason names the shedding, not silence.

``UnansweredAdds`` keeps, per bookie, the time each add was sent to it, in
send order, so a bookie's oldest unanswered add is the first of its dict. A
shed add's answer took it out of that order; it goes back in with its first
send time (``kept_unanswered``) and is also remembered apart, so the sweep
weighs it by that time and not by its new place (W7: the timeout counts from
the first send, also when newer adds are ahead of it in the dict). Time is given, never
read: the caller passes ``now`` (the core reads no clock). ``timed_out(now,
add_timeout_s)`` is the decision: for each bookie whose oldest unanswered add
was sent more than ``add_timeout_s`` before ``now``, a ``SilentBookie`` with
that entry and the reason to report. Not thread-safe: the writer's owner
serializes every call.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

__all__ = ["SilentBookie", "UnansweredAdds"]


class SilentBookie(NamedTuple):
    """``bookie`` left ``entry_id`` (its oldest unanswered add) unanswered too long: a bookie failure."""

    bookie: str
    entry_id: int
    reason: str


class UnansweredAdds:
    """Send times of unanswered adds per bookie, and which bookies still shed load (see the module docstring)."""

    def __init__(self) -> None:
        self._sent: dict[str, dict[int, float]] = {}
        self._shedding: dict[str, str] = {}  # bookie -> its last TOO_MANY_REQUESTS message
        self._shed_adds: dict[str, set[int]] = {}  # bookie -> shed adds put back out of send order

    def sent(self, bookie: str, entry_id: int, now: float) -> None:
        per_bookie = self._sent.get(bookie)
        if per_bookie is None:
            per_bookie = self._sent[bookie] = {}
        per_bookie[entry_id] = now

    def sent_to_all(self, bookies: Iterable[str], entry_id: int, now: float) -> None:
        """``sent(bookie, entry_id, now)`` for each of ``bookies`` (a write set: the writer's hot path)."""
        per = self._sent
        for bookie in bookies:
            per_bookie = per.get(bookie)
            if per_bookie is None:
                per_bookie = per[bookie] = {}
            per_bookie[entry_id] = now

    def sent_many(self, bookie: str, entry_ids: Iterable[int], now: float) -> None:
        """``sent(bookie, entry_id, now)`` for each of ``entry_ids``, in that order (a turn of new adds that all
        go to the same bookies: one call per bookie instead of one per entry)."""
        per_bookie = self._sent.get(bookie)
        if per_bookie is None:
            per_bookie = self._sent[bookie] = {}
        per_bookie.update(dict.fromkeys(entry_ids, now))

    def kept_unanswered(self, bookie: str, entry_id: int, first_sent: float) -> None:
        """A shed add waits for its re-send: unanswered again, still timed from ``first_sent`` (W7)."""
        self.sent(bookie, entry_id, first_sent)
        self._shed_adds.setdefault(bookie, set()).add(entry_id)

    def of(self, bookie: str) -> dict[int, float] | None:
        """The bookie's unanswered adds (entry id -> first send time), to pop answers from; None if none."""
        return self._sent.get(bookie)

    def answered(self, bookie: str, entry_ids: Iterable[int]) -> None:
        """``bookie`` answered ``entry_ids`` (an all-OK batch or a run): they are no longer awaited from it."""
        per_bookie = self._sent.get(bookie)
        if per_bookie is not None:
            for entry_id in entry_ids:  # a plain loop: cheaper than C-level maps for one id and no dearer for many
                per_bookie.pop(entry_id, None)

    def is_unanswered(self, bookie: str, entry_id: int) -> bool:
        per_bookie = self._sent.get(bookie)
        return per_bookie is not None and entry_id in per_bookie

    def shed(self, bookie: str, message: str) -> None:
        """``bookie`` answered TOO_MANY_REQUESTS (the add stays unanswered with its first send time)."""
        self._shedding[bookie] = message

    def acked(self, bookie: str) -> None:
        """``bookie`` stored an add: it no longer sheds load."""
        if self._shedding:
            self._shedding.pop(bookie, None)

    def forget(self, bookie: str) -> None:
        """``bookie`` failed or left the ensemble: none of its adds is awaited any more."""
        self._sent.pop(bookie, None)
        self._shed_adds.pop(bookie, None)

    def timed_out(self, now: float, add_timeout_s: float) -> list[SilentBookie]:
        """The bookies whose oldest unanswered add was sent more than ``add_timeout_s`` before ``now``."""
        limit = now - add_timeout_s
        silent = []
        for bookie, per_bookie in self._sent.items():
            oldest = next(iter(per_bookie.items()), None)
            shed_adds = self._shed_adds.get(bookie)
            if shed_adds:  # a few at most: adds shed since the last sweep, or still waiting for their re-send
                shed_adds.intersection_update(per_bookie.keys())  # answered or confirmed ones are done
                for entry_id in shed_adds:
                    if oldest is None or per_bookie[entry_id] < oldest[1]:
                        oldest = (entry_id, per_bookie[entry_id])
            if oldest is None or oldest[1] >= limit:
                continue
            shed = self._shedding.get(bookie)
            reason = (f"no answer within {add_timeout_s} s" if shed is None else
                      f"TOO_MANY_REQUESTS for {add_timeout_s} s (shedding load): {shed}")
            silent.append(SilentBookie(bookie, oldest[0], reason))
        return silent
