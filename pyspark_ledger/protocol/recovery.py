"""The ledger recovery state machine: fence, find the end, write back, close.

docs/protocol.md, sections F (fencing) and R (recovery).
The caller first moves the metadata to IN_RECOVERY (``ledger_rules.mark_in_recovery``,
CAS), builds ``LedgerRecovery`` from that metadata, then executes the actions
it returns and feeds every answer back. An empty tuple means "wait".

1. ``FenceAndReadLac`` to every bookie of the current fragment. Done once the
   explicit answers cover every write set (``reads.LacRead``); then
   ``start_entry = max(max LAC, current fragment first entry - 1) + 1`` (R8).
2. ``ReadEntry`` of ``start_entry - 1`` (confirmed, so only its header's
   length is needed; an explicit "absent" there is data loss, not an end).
3. Read forward from ``start_entry``, one entry at a time, from its whole
   write set with the fence flag (F3: reads fence too, so a bookie that said
   "no such entry" can never accept the old writer's add later). Per entry
   (``coverage.EntryTally``): PRESENT -> ``WriteBack`` to the write set with the
   recovery flag and read the next; ABSENT (Qw - Qa + 1 explicit negatives,
   R4) -> the ledger ends at the entry before; UNKNOWN -> ``RecoveryFailed``,
   never a close (R5). Empty ledger: ends at -1, length 0 (R1).
4. Write-backs are confirmed like a writer's adds (``AddTracker``, Qa acks).
   A failed write-back asks for ``ChooseReplacements``; the entries are re-sent
   to the replacements (R7). No replacement -> ``RecoveryFailed`` (R6).
5. ``CloseLedger`` with the CLOSED metadata (write-back fragments included),
   once every write-back is confirmed. The caller CASes it against the version
   it recovered from; on a conflict see ``ledger_rules.resolve_recovery_close_conflict``.

Reads always use the ensemble recovery started with: a write-back ensemble
change is published only together with the close, after every moved entry
has Qa copies in the new ensemble, so no later reader can find a confirmed
entry "absent" because it was moved to a bookie that never had it.
"""
from __future__ import annotations

import enum
from typing import Mapping

from pyspark_ledger.errors import InvalidArgumentError, LedgerClosedError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED, OPEN, LedgerMetadata
from pyspark_ledger.protocol.add_tracker import AddTracker, EnsembleChangeRequest
from pyspark_ledger.protocol.answers import LacAnswer, ReadAnswer
from pyspark_ledger.protocol.coverage import EntryOutcome, EntryTally
from pyspark_ledger.protocol.ledger_rules import ensemble_change, recovery_close
from pyspark_ledger.protocol.placement import apply_replacements
from pyspark_ledger.protocol.reads import LacRead
from pyspark_ledger.protocol.recovery_actions import (
    Action, ChooseReplacements, CloseLedger, FenceAndReadLac, ReadEntry, RecoveryFailed, WriteBack,
)
from pyspark_ledger.protocol.schedule import Quorums

__all__ = [
    "Action", "ChooseReplacements", "CloseLedger", "FenceAndReadLac", "LedgerRecovery", "ReadEntry",
    "RecoveryFailed", "RecoveryPhase", "WriteBack",
]


class RecoveryPhase(enum.Enum):
    FENCING = "fencing"
    READING = "reading"
    WRITING_BACK = "writing_back"  # the end is known; write-backs still pending
    CLOSING = "closing"
    FAILED = "failed"


class LedgerRecovery:
    """Recovery of one ledger from its IN_RECOVERY metadata."""

    def __init__(self, metadata: LedgerMetadata) -> None:
        if metadata.state == OPEN:
            raise RecoveryError(f"ledger {metadata.ledger_id} is OPEN: mark it IN_RECOVERY first")
        if metadata.state == CLOSED:
            raise LedgerClosedError(f"ledger {metadata.ledger_id} is already CLOSED: nothing to recover")
        self._md = metadata
        self._quorums = Quorums.of(metadata)
        self._fragment = metadata.current_fragment
        self._lac_read = LacRead(self._fragment.bookies, metadata.write_quorum, metadata.ack_quorum)
        self._phase = RecoveryPhase.FENCING
        self.start_entry: int | None = None
        self.last_entry_id: int | None = None
        self._reading = -1
        self._tally: EntryTally | None = None
        self._read_index: dict[str, int] = {}
        self._writeback: AddTracker | None = None
        self._base_length = 0
        self._bodies: dict[int, bytes] = {}
        self._awaiting: EnsembleChangeRequest | None = None
        self._changes: list[tuple[int, tuple[str, ...]]] = []
        self._failed_bookies: set[str] = set()

    @property
    def phase(self) -> RecoveryPhase:
        return self._phase

    def start(self) -> tuple[Action, ...]:
        return (FenceAndReadLac(self._fragment.bookies),)

    # --- step 1: fence and read the LAC -----------------------------------------
    def on_lac_answer(self, bookie_id: str, answer: LacAnswer) -> tuple[Action, ...]:
        result = self._lac_read.record(bookie_id, answer)
        if self._phase is not RecoveryPhase.FENCING or not result.done:
            return ()
        if result.failed:
            return self._fail(f"cannot fence ledger {self._md.ledger_id}: {result.reason}")
        self.start_entry = max(result.last_add_confirmed, self._fragment.first_entry_id - 1) + 1
        self._phase = RecoveryPhase.READING
        if self.start_entry == 0:
            return self._begin_write_back(0)
        return (self._read(self.start_entry - 1, fence=False),)

    # --- steps 2 and 3: read forward ----------------------------------------------
    def _read(self, entry_id: int, fence: bool) -> ReadEntry:
        ensemble = self._md.ensemble_for(entry_id)
        write_set = self._quorums.write_set(entry_id)
        self._reading = entry_id
        self._tally = EntryTally(write_set, self._quorums.write_quorum, self._quorums.ack_quorum)
        self._read_index = {ensemble[i]: i for i in write_set}
        return ReadEntry(entry_id, tuple(ensemble[i] for i in write_set), fence)

    def on_read_answer(self, entry_id: int, bookie_id: str, answer: ReadAnswer) -> tuple[Action, ...]:
        if self._phase is not RecoveryPhase.READING or entry_id != self._reading:
            return ()
        if bookie_id not in self._read_index:
            raise InvalidArgumentError(f"bookie {bookie_id!r} does not store entry {entry_id}")
        outcome = self._tally.record(self._read_index[bookie_id], answer.kind)
        if outcome is EntryOutcome.PENDING:
            return ()
        if outcome is EntryOutcome.UNKNOWN:
            return self._fail(f"entry {entry_id} of ledger {self._md.ledger_id}: only {self._tally.negatives}"
                              f" explicit 'no such entry' answers of the {self._tally.threshold} needed,"
                              " the others unknown; the ledger's end cannot be decided")
        if entry_id < self.start_entry:
            return self._on_anchor(outcome, answer)
        if outcome is EntryOutcome.ABSENT:
            self.last_entry_id = entry_id - 1
            self._phase = RecoveryPhase.WRITING_BACK
            return self._maybe_close()
        return self._on_present(entry_id, answer)

    def _on_anchor(self, outcome: EntryOutcome, answer: ReadAnswer) -> tuple[Action, ...]:
        if outcome is EntryOutcome.ABSENT:
            return self._fail(f"entry {self._reading} is confirmed but {self._tally.negatives} bookies say it"
                              " does not exist: data lost beyond what the quorums tolerate")
        return self._begin_write_back(answer.length)

    def _begin_write_back(self, base_length: int) -> tuple[Action, ...]:
        self._base_length = base_length
        self._writeback = AddTracker(self._fragment.bookies, self._quorums.write_quorum,
                                     self._quorums.ack_quorum, last_add_confirmed=self.start_entry - 1,
                                     length=base_length)
        return (self._read(self.start_entry, fence=True),)

    def _on_present(self, entry_id: int, answer: ReadAnswer) -> tuple[Action, ...]:
        try:
            plan = self._writeback.add_recovered(entry_id, answer.length)
        except InvalidArgumentError as exc:
            return self._fail(f"entry {entry_id} has an inconsistent length: {exc}")
        self._bodies[entry_id] = answer.body
        actions: list[Action] = [WriteBack(entry_id, answer.body, plan.targets)] if plan.targets else []
        actions.append(self._read(entry_id + 1, fence=True))
        return tuple(actions)

    # --- step 4: write back ---------------------------------------------------------
    def on_write_back_ack(self, entry_id: int, bookie_id: str) -> tuple[Action, ...]:
        if self._writeback is None or self._phase in (RecoveryPhase.FAILED, RecoveryPhase.CLOSING):
            return ()
        for confirmed in self._writeback.ack(entry_id, bookie_id):
            self._bodies.pop(confirmed.entry_id, None)
        return self._maybe_close()

    def on_write_back_failure(self, entry_id: int, bookie_id: str) -> tuple[Action, ...]:
        if self._writeback is None or self._phase in (RecoveryPhase.FAILED, RecoveryPhase.CLOSING):
            return ()
        self._failed_bookies.add(bookie_id)
        request = self._writeback.failed(bookie_id)
        return self._ask_replacements(request) if request else ()

    def _ask_replacements(self, request: EnsembleChangeRequest) -> tuple[Action, ...]:
        self._awaiting = request
        exclude = tuple(sorted(self._failed_bookies))
        return (ChooseReplacements(dict(request.failed), request.ensemble, exclude),)

    def on_replacements(self, replacements: Mapping[int, str]) -> tuple[Action, ...]:
        if self._awaiting is None or self._phase in (RecoveryPhase.FAILED, RecoveryPhase.CLOSING):
            return ()
        request, self._awaiting = self._awaiting, None
        ensemble = apply_replacements(request.ensemble, replacements)
        self._changes.append((request.first_unconfirmed_entry, ensemble))
        outcome = self._writeback.ensemble_changed(ensemble)
        for confirmed in outcome.confirmed:
            self._bodies.pop(confirmed.entry_id, None)
        actions: list[Action] = [WriteBack(r.entry_id, self._bodies[r.entry_id], r.targets)
                                 for r in outcome.resends]
        if outcome.next_change is not None:
            return tuple(actions) + self._ask_replacements(outcome.next_change)
        return tuple(actions) + self._maybe_close()

    def on_replacement_failure(self, reason: str) -> tuple[Action, ...]:
        if self._phase in (RecoveryPhase.FAILED, RecoveryPhase.CLOSING):
            return ()
        return self._fail(f"write-back of ledger {self._md.ledger_id} is impossible: {reason}")

    # --- step 5: close ----------------------------------------------------------------
    def _maybe_close(self) -> tuple[Action, ...]:
        tracker = self._writeback
        if self._phase is not RecoveryPhase.WRITING_BACK or tracker.pending_entry_ids or tracker.changing_ensemble:
            return ()
        self._phase = RecoveryPhase.CLOSING
        return (CloseLedger(self.closed_metadata()),)

    def closed_metadata(self) -> LedgerMetadata:
        """The CLOSED metadata: write-back fragments applied, end and length set."""
        if self.last_entry_id is None:
            raise RecoveryError("the ledger's end is not decided yet")
        metadata = self._md
        for first_entry, ensemble in self._changes:
            current = metadata.current_fragment.bookies
            replaced = {i: bookie for i, bookie in enumerate(ensemble) if current[i] != bookie}
            if replaced:
                metadata = ensemble_change(metadata, replaced, first_entry, in_recovery=True)
        length = self._writeback.length if self.last_entry_id >= self.start_entry else self._base_length
        return recovery_close(metadata, self.last_entry_id, length)

    def _fail(self, reason: str) -> tuple[Action, ...]:
        self._phase = RecoveryPhase.FAILED
        if self._writeback is not None:
            self._writeback.stop(reason)
        return (RecoveryFailed(f"{reason}; ledger {self._md.ledger_id} left unclosed"),)
