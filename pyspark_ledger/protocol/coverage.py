"""Quorum coverage: when have enough bookies answered that no ack quorum is unheard?

docs/protocol.md Q3 (BookKeeper's RRQuorumCoverageSet does the same job):
fencing -- and any read of the LAC -- is complete once
at least Qw - Qa + 1 bookies of *every* write set answered. Equivalently, no
write set holds Qa bookies that did not answer, so no ack quorum can consist
only of bookies we know nothing about. An explicit answer (OK, or "no such
ledger/entry") counts; an unknown (timeout, error) does not.

Per entry (docs/protocol.md A2, A3): an entry is

* PRESENT once one verified replica was read;
* ABSENT only after Qw - Qa + 1 explicit negatives from its write set -- then at
  most Qa - 1 bookies can hold it, so it was never confirmed (R4: decide as
  soon as that many negatives arrived, even if another bookie hangs);
* UNKNOWN when its whole write set answered or failed and neither holds
  (timeouts and errors are never negatives: R5).
"""
from __future__ import annotations

import enum
from typing import Iterable

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata.model import check_quorums
from pyspark_ledger.protocol.answers import AnswerKind
from pyspark_ledger.protocol.schedule import Quorums, all_write_sets, check_bookie_index


def is_covered(ensemble_size: int, write_quorum: int, ack_quorum: int, responders: Iterable[int]) -> bool:
    """Whether every write set has >= Qw - Qa + 1 members among ``responders``."""
    quorums = Quorums(ensemble_size, write_quorum, ack_quorum)
    heard = frozenset(responders)
    return all(
        sum(1 for index in members if index in heard) >= quorums.coverage_threshold
        for members in all_write_sets(ensemble_size, write_quorum)
    )


def can_still_be_covered(ensemble_size: int, write_quorum: int, ack_quorum: int, failed: Iterable[int]) -> bool:
    """False once some write set has >= Qa failed bookies: coverage is then impossible."""
    Quorums(ensemble_size, write_quorum, ack_quorum)
    lost = frozenset(failed)
    return all(
        sum(1 for index in members if index in lost) < ack_quorum
        for members in all_write_sets(ensemble_size, write_quorum)
    )


class CoverageTracker:
    """Incremental coverage over one ensemble: feed answers, ask whether covered."""

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        self.quorums = Quorums(ensemble_size, write_quorum, ack_quorum)
        self._responded: set[int] = set()
        self._failed: set[int] = set()

    def record(self, bookie_index: int, kind: AnswerKind) -> bool:
        """Record one bookie's answer; returns whether coverage now holds.

        A later explicit answer from a bookie that had failed replaces the failure.
        """
        check_bookie_index(bookie_index, self.quorums.ensemble_size)
        if kind is AnswerKind.UNKNOWN:
            if bookie_index not in self._responded:
                self._failed.add(bookie_index)
        else:
            self._failed.discard(bookie_index)
            self._responded.add(bookie_index)
        return self.covered

    @property
    def covered(self) -> bool:
        q = self.quorums
        return is_covered(q.ensemble_size, q.write_quorum, q.ack_quorum, self._responded)

    @property
    def impossible(self) -> bool:
        """True once no further answers can reach coverage."""
        q = self.quorums
        return not can_still_be_covered(q.ensemble_size, q.write_quorum, q.ack_quorum, self._failed)

    @property
    def all_answered(self) -> bool:
        return len(self._responded) + len(self._failed) == self.quorums.ensemble_size

    @property
    def responders(self) -> frozenset[int]:
        return frozenset(self._responded)

    @property
    def failed(self) -> frozenset[int]:
        return frozenset(self._failed)


class EntryOutcome(enum.Enum):
    PENDING = "pending"
    PRESENT = "present"
    ABSENT = "absent"
    UNKNOWN = "unknown"


class EntryTally:
    """Answers about one entry from its write set, and the decision they allow.

    The first decision reached sticks: later answers do not change it.
    """

    def __init__(self, write_set: Iterable[int], write_quorum: int, ack_quorum: int) -> None:
        self.write_set = tuple(write_set)
        if len(self.write_set) != write_quorum or len(set(self.write_set)) != write_quorum:
            raise InvalidArgumentError(
                f"a write set needs {write_quorum} distinct bookie indexes, got {self.write_set}"
            )
        check_quorums(write_quorum, write_quorum, ack_quorum)
        self.threshold = write_quorum - ack_quorum + 1
        self._answers: dict[int, AnswerKind] = {}
        self._outcome = EntryOutcome.PENDING

    def record(self, bookie_index: int, kind: AnswerKind) -> EntryOutcome:
        """Record one answer (an unknown may be replaced by a later explicit one)."""
        if bookie_index not in self.write_set:
            raise InvalidArgumentError(
                f"bookie index {bookie_index} is not in this entry's write set {self.write_set}"
            )
        if self._answers.get(bookie_index, AnswerKind.UNKNOWN) is AnswerKind.UNKNOWN:
            self._answers[bookie_index] = kind
        if self._outcome is EntryOutcome.PENDING:
            self._outcome = self._decide()
        return self._outcome

    def _decide(self) -> EntryOutcome:
        kinds = list(self._answers.values())
        if AnswerKind.POSITIVE in kinds:
            return EntryOutcome.PRESENT
        if kinds.count(AnswerKind.NEGATIVE) >= self.threshold:
            return EntryOutcome.ABSENT
        if len(kinds) == len(self.write_set):
            return EntryOutcome.UNKNOWN
        return EntryOutcome.PENDING

    @property
    def outcome(self) -> EntryOutcome:
        return self._outcome

    @property
    def negatives(self) -> int:
        return sum(1 for kind in self._answers.values() if kind is AnswerKind.NEGATIVE)

    @property
    def unanswered(self) -> tuple[int, ...]:
        return tuple(index for index in self.write_set if index not in self._answers)
