"""Read plans: one entry from its replicas, and the last add confirmed from an ensemble.

``ReadPlan`` -- an ordinary read of one entry. Replicas are asked in
write-set order, one at a time; a failed, slow (the caller's timer calls
``speculative_replica_after``) or corrupt replica (L5: the caller verified the digest
and answered ``unknown``) moves the read to the next replica. A read is slow only
while no answer of it is in hand: once the caller has one (``arrived``) and is
verifying it, a timer that fires sends nothing (docs/protocol.md L7). The result is
"no such entry" only by docs/protocol.md A2: Qw - Qa + 1 explicit
negatives; running out of replicas otherwise is a failure (unknown).

``LacRead`` -- the LAC read of a non-recovery open (F2) and of recovery's
fencing step: the answer is the highest LAC once the answers cover every
write set (``coverage``). Why this never reports an empty ledger that has
data (L2): let y be the last confirmed entry that carried LAC value L; Qa
bookies of y's write set stored it. Coverage means >= Qw - Qa + 1 bookies of
that same write set answered explicitly, and Qa + (Qw - Qa + 1) > Qw, so one
answering bookie holds y and reports a LAC >= L. A "no such ledger" from one
bookie with another down is not coverage (L1/L2), so the read waits or fails
instead of concluding -1.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.protocol.answers import AnswerKind, LacAnswer, ReadAnswer
from pyspark_ledger.protocol.coverage import CoverageTracker, EntryOutcome, EntryTally
from pyspark_ledger.protocol.schedule import Quorums


class ReadStepKind(enum.Enum):
    SEND = "send"  # ask ``bookie``
    WAIT = "wait"  # replicas already asked have not all answered
    DONE = "done"  # ``answer`` holds the entry
    NO_SUCH_ENTRY = "no_such_entry"
    FAILED = "failed"  # every replica answered, no verdict: an unknown outcome


@dataclass(frozen=True, slots=True)
class ReadStep:
    kind: ReadStepKind
    bookie: str = ""
    answer: ReadAnswer | None = None
    reason: str = ""


class ReadPlan:
    """The read of entry ``entry_id`` from its replicas in ``ensemble``."""

    def __init__(self, entry_id: int, ensemble: Sequence[str], write_quorum: int, ack_quorum: int) -> None:
        quorums = Quorums(len(ensemble), write_quorum, ack_quorum)
        self.entry_id = entry_id
        write_set = quorums.write_set(entry_id)
        self.replicas = tuple(str(ensemble[index]) for index in write_set)
        self._index_of = {bookie: index for bookie, index in zip(self.replicas, write_set)}
        self._tally = EntryTally(write_set, write_quorum, ack_quorum)
        self._asked: list[str] = []
        self._reasons: dict[str, str] = {}
        self._in_hand: set[str] = set()  # replicas whose answer arrived and is not yet fed to on_answer
        self._answered: set[str] = set()
        self._final: ReadStep | None = None

    def first(self) -> ReadStep:
        """Ask the first replica of the write set."""
        if not self._asked:
            self._asked.append(self.replicas[0])
        return ReadStep(ReadStepKind.SEND, self.replicas[0])

    def next_replica_after(self, bookie_id: str) -> str | None:
        """The next replica to ask after ``bookie_id`` (slow or failed), or None if all were asked."""
        start = self.replicas.index(self._check(bookie_id))
        for offset in range(1, len(self.replicas)):
            candidate = self.replicas[(start + offset) % len(self.replicas)]
            if candidate not in self._asked:
                self._asked.append(candidate)
                return candidate
        return None

    def arrived(self, bookie_id: str) -> None:
        """An answer of ``bookie_id`` is in hand (the caller verifies it, then feeds it to ``on_answer``)."""
        self._in_hand.add(self._check(bookie_id))
        self._answered.add(bookie_id)

    def unanswered(self) -> tuple[str, ...]:
        """The replicas asked whose answer has not arrived, in the order they were asked."""
        return tuple(bookie for bookie in self._asked if bookie not in self._answered)

    def speculative_replica_after(self, bookie_id: str) -> str | None:
        """The replica to ask because ``bookie_id`` was slow (the caller's timer fired, L7), or None: the read
        is decided, ``bookie_id`` answered, an answer is in hand (the time since it arrived is the caller's,
        not the replica's), or every replica was asked."""
        if self._final is not None or self._check(bookie_id) in self._answered or self._in_hand:
            return None
        return self.next_replica_after(bookie_id)

    def on_answer(self, bookie_id: str, answer: ReadAnswer) -> ReadStep:
        """Feed one replica's answer; returns what to do next (final steps repeat)."""
        index = self._index_of[self._check(bookie_id)]
        self._in_hand.discard(bookie_id)
        self._answered.add(bookie_id)
        if self._final is not None:
            return self._final
        if bookie_id not in self._asked:
            self._asked.append(bookie_id)
        if answer.kind is not AnswerKind.POSITIVE:
            self._reasons[bookie_id] = answer.reason or answer.kind.value
        outcome = self._tally.record(index, answer.kind)
        if outcome is EntryOutcome.PRESENT:
            self._final = ReadStep(ReadStepKind.DONE, bookie_id, answer)
        elif outcome is EntryOutcome.ABSENT:
            self._final = ReadStep(ReadStepKind.NO_SUCH_ENTRY, reason=self._explain())
        elif outcome is EntryOutcome.UNKNOWN:
            self._final = ReadStep(ReadStepKind.FAILED, reason=self._explain())
        else:
            following = self.next_replica_after(bookie_id)
            return ReadStep(ReadStepKind.SEND, following) if following else ReadStep(ReadStepKind.WAIT)
        return self._final

    def _check(self, bookie_id: str) -> str:
        if bookie_id not in self._index_of:
            raise InvalidArgumentError(
                f"bookie {bookie_id!r} is not a replica of entry {self.entry_id} ({', '.join(self.replicas)})"
            )
        return bookie_id

    def _explain(self) -> str:
        details = "; ".join(f"{bookie}: {why}" for bookie, why in self._reasons.items())
        return f"entry {self.entry_id}: {details}"


@dataclass(frozen=True, slots=True)
class LacReadResult:
    done: bool
    last_add_confirmed: int = -1
    failed: bool = False
    reason: str = ""


class LacRead:
    """Aggregates LAC answers from an ensemble: the max LAC once coverage holds."""

    def __init__(self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int) -> None:
        self.ensemble = tuple(str(bookie) for bookie in ensemble)
        self._index_of = {bookie: index for index, bookie in enumerate(self.ensemble)}
        self._coverage = CoverageTracker(len(self.ensemble), write_quorum, ack_quorum)
        self._max_lac = -1
        self._reasons: dict[str, str] = {}
        self._result = LacReadResult(done=False)

    def record(self, bookie_id: str, answer: LacAnswer) -> LacReadResult:
        """Feed one bookie's answer; the first final result sticks."""
        if bookie_id not in self._index_of:
            raise InvalidArgumentError(f"bookie {bookie_id!r} is not in ensemble {self.ensemble}")
        if self._result.done:
            return self._result
        if answer.kind is AnswerKind.POSITIVE:
            self._max_lac = max(self._max_lac, answer.last_add_confirmed)
        else:
            self._reasons[bookie_id] = answer.reason or answer.kind.value
        self._coverage.record(self._index_of[bookie_id], answer.kind)
        if self._coverage.covered:
            self._result = LacReadResult(done=True, last_add_confirmed=self._max_lac)
        elif self._coverage.impossible:
            details = "; ".join(f"{bookie}: {why}" for bookie, why in self._reasons.items())
            self._result = LacReadResult(
                done=True, failed=True,
                reason=f"too few bookies answered to cover every write quorum ({details})",
            )
        return self._result

    @property
    def result(self) -> LacReadResult:
        return self._result
