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
3. Read forward from ``start_entry`` with ``window`` entries in flight at once
   (``recovery_window.ForwardReads``, R9; asked for together with step 2), each
   from its whole write set with the fence flag (F3: reads fence too, so a bookie
   that said "no such entry" can never accept the old writer's add later). Per
   entry (``coverage.EntryTally``), taken strictly in entry order: PRESENT ->
   ``WriteBack`` to the write set with the recovery flag (without waiting for
   earlier write-backs); ABSENT (Qw - Qa + 1 explicit negatives, R4) -> the ledger
   ends at the entry before, and nothing decided about later entries is used;
   UNKNOWN -> ``RecoveryFailed``, never a close (R5). Empty ledger: ends at -1,
   length 0 (R1).
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
from typing import Iterable, Mapping

from pyspark_ledger.entry import MAX_ENTRY_ID
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
from pyspark_ledger.protocol.recovery_window import ForwardReads, check_window
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
    """Recovery of one ledger from its IN_RECOVERY metadata, reading forward ``window`` entries at once."""

    def __init__(self, metadata: LedgerMetadata, window: int = 1) -> None:
        if metadata.state == OPEN:
            raise RecoveryError(f"ledger {metadata.ledger_id} is OPEN: mark it IN_RECOVERY first")
        if metadata.state == CLOSED:
            raise LedgerClosedError(f"ledger {metadata.ledger_id} is already CLOSED: nothing to recover")
        self._md = metadata
        self._quorums = Quorums.of(metadata)
        self._fragment = metadata.current_fragment
        self._window = check_window(window)
        self._lac_read = LacRead(self._fragment.bookies, metadata.write_quorum, metadata.ack_quorum)
        self._phase = RecoveryPhase.FENCING
        self.start_entry: int | None = None
        self.last_entry_id: int | None = None
        self._anchor: EntryTally | None = None   # entry start_entry - 1, read for its length only
        self._anchor_index: dict[str, int] = {}
        self._reads: ForwardReads | None = None
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
        self._reads = ForwardReads(self._fragment.bookies, self._quorums, self.start_entry, self._window)
        if self.start_entry == 0:
            self._begin_write_back(0)
            return self._reads.ask()
        return (self._read_anchor(self.start_entry - 1),) + self._reads.ask()

    # --- steps 2 and 3: read forward ----------------------------------------------
    def _read_anchor(self, entry_id: int) -> ReadEntry:
        ensemble = self._md.ensemble_for(entry_id)
        write_set = self._quorums.write_set(entry_id)
        self._anchor = EntryTally(write_set, self._quorums.write_quorum, self._quorums.ack_quorum)
        self._anchor_index = {ensemble[i]: i for i in write_set}
        return ReadEntry(entry_id, tuple(ensemble[i] for i in write_set), False)

    def awaiting(self, entry_id: int) -> bool:
        """Whether an answer about ``entry_id`` can still matter (the I/O layer skips reading and verifying
        copies nobody waits for)."""
        if self._phase is not RecoveryPhase.READING:
            return False
        if entry_id == self.start_entry - 1 and self._writeback is None:
            return self._anchor.outcome is EntryOutcome.PENDING
        return self._reads.awaiting(entry_id)

    def on_read_answer(self, entry_id: int, bookie_id: str, answer: ReadAnswer) -> tuple[Action, ...]:
        if self._phase is not RecoveryPhase.READING:
            return ()
        if entry_id == self.start_entry - 1 and self._writeback is None:
            return self._on_anchor_answer(bookie_id, answer)
        if not self._reads.record(entry_id, bookie_id, answer) or self._writeback is None:
            return ()
        return self._take()

    def _on_anchor_answer(self, bookie_id: str, answer: ReadAnswer) -> tuple[Action, ...]:
        entry_id = self.start_entry - 1
        if bookie_id not in self._anchor_index:
            raise InvalidArgumentError(f"bookie {bookie_id!r} does not store entry {entry_id}")
        outcome = self._anchor.record(self._anchor_index[bookie_id], answer.kind)
        if outcome is EntryOutcome.PENDING:
            return ()
        if outcome is EntryOutcome.UNKNOWN:
            return self._fail(_undecided(entry_id, self._md.ledger_id, self._anchor))
        if outcome is EntryOutcome.ABSENT:
            return self._fail(f"entry {entry_id} is confirmed but {self._anchor.negatives} bookies say it"
                              " does not exist: data lost beyond what the quorums tolerate")
        self._begin_write_back(answer.length)
        return self._take()

    def _begin_write_back(self, base_length: int) -> None:
        self._base_length = base_length
        self._writeback = AddTracker(self._fragment.bookies, self._quorums.write_quorum,
                                     self._quorums.ack_quorum, last_add_confirmed=self.start_entry - 1,
                                     length=base_length)

    def _take(self) -> tuple[Action, ...]:
        """Act on the decided entries in entry order (R9): write back PRESENT ones, stop at the first other."""
        actions: list[Action] = []
        for entry_id, outcome, tally, answer in self._reads.take():
            if outcome is EntryOutcome.UNKNOWN:
                return self._fail(_undecided(entry_id, self._md.ledger_id, tally))
            if outcome is EntryOutcome.ABSENT:
                return tuple(actions) + self._end_at(entry_id - 1)
            try:
                plan = self._writeback.add_recovered(entry_id, answer.length)
            except InvalidArgumentError as exc:
                return self._fail(f"entry {entry_id} has an inconsistent length: {exc}")
            self._bodies[entry_id] = answer.body
            if plan.targets:
                actions.append(WriteBack(entry_id, answer.body, plan.targets))
        if self._reads.next_entry_id > MAX_ENTRY_ID:  # no entry can follow the largest id (writers stop before)
            return tuple(actions) + self._end_at(MAX_ENTRY_ID)
        return tuple(actions) + self._reads.ask()

    def _end_at(self, last_entry_id: int) -> tuple[Action, ...]:
        self.last_entry_id = last_entry_id
        self._reads.stop()
        self._phase = RecoveryPhase.WRITING_BACK
        return self._maybe_close()

    # --- step 4: write back ---------------------------------------------------------
    def on_write_back_ack(self, entry_id: int, bookie_id: str) -> tuple[Action, ...]:
        return self.on_write_back_acks((entry_id,), bookie_id)

    def on_write_back_acks(self, entry_ids: Iterable[int], bookie_id: str) -> tuple[Action, ...]:
        """``bookie_id`` acknowledged the write-backs of ``entry_ids`` (one answer batch)."""
        if self._writeback is None or self._phase in (RecoveryPhase.FAILED, RecoveryPhase.CLOSING):
            return ()
        for confirmed in self._writeback.ack_many(entry_ids, bookie_id):
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
        if self._reads is not None:
            self._reads.stop()
        return (RecoveryFailed(f"{reason}; ledger {self._md.ledger_id} left unclosed"),)


def _undecided(entry_id: int, ledger_id: int, tally: EntryTally) -> str:
    return (f"entry {entry_id} of ledger {ledger_id}: only {tally.negatives} explicit 'no such entry' answers"
            f" of the {tally.threshold} needed, the others unknown; the ledger's end cannot be decided")
