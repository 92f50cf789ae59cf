"""Executing ledger recovery: mark IN_RECOVERY, then run ``protocol.recovery.LedgerRecovery``.

The state machine decides everything (docs/protocol.md R1-R8): this module marks
the ledger IN_RECOVERY by CAS (``metadata_ops.start_recovery``), executes the
actions it returns -- fencing LAC reads, fencing entry reads, write-backs with
the recovery flag, replacement choices, the closing CAS -- and feeds every
answer back, one at a time, on the calling thread (answers are queued by the
transport threads). The entry reads asked for at once (a window, R9) go out as
range reads, one per bookie and run of entries (``protocol.recovery_reads``);
an answer that stops short is followed by a read of the rest while recovery
still waits for one of its entries, and copies nobody waits for any more are
not verified. An answer that never comes does not stall a decision the
state machine can make without it (R4); every request has a deadline, and
the whole recovery is bounded by ``recovery_timeout_s``. When the close CAS
(``metadata_ops.recovery_close``) finds the ledger CLOSED by another recoverer
that end is adopted (R3); when the metadata changed otherwise, recovery runs
again from the stored version.
"""
from __future__ import annotations

import logging
import queue
import time
from concurrent.futures import Future
from typing import Callable

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.lac_reads import lac_answer
from pyspark_ledger.client.metadata_ops import recovery_close, start_recovery
from pyspark_ledger.client.metadata_update import retry_policy
from pyspark_ledger.client.recovery_writeback import WriteBacks
from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.entry import EntryCodec
from pyspark_ledger.errors import CorruptEntryError, LedgerError, RecoveryError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.metadata.update_loop import RetryPolicy
from pyspark_ledger.protocol.answers import LacAnswer, ReadAnswer
from pyspark_ledger.protocol.recovery import (ChooseReplacements, CloseLedger, FenceAndReadLac, LedgerRecovery,
                                              ReadEntry, RecoveryFailed, WriteBack)
from pyspark_ledger.protocol.recovery_reads import RangeRead, coalesce, read_step
from pyspark_ledger.protocol.schedule import Quorums

log = logging.getLogger(__name__)


def recover_ledger(ctx: ClientContext, stored: Versioned[LedgerMetadata], key: bytes,
                   codec: EntryCodec, retry: RetryPolicy | None = None) -> Versioned[LedgerMetadata]:
    """Recover and close the ledger; returns its CLOSED metadata. RecoveryError if the end cannot be decided.

    A run whose closing compare-and-set found the metadata changed otherwise (not CLOSED by another
    recoverer) runs again from the stored version, as ``retry`` allows (default: the client's
    ``metadata_retries`` attempts); ``retry`` also paces each compare-and-set loop of the recovery."""
    retry = retry_policy(ctx.config) if retry is None else retry
    ledger_id = stored.value.ledger_id
    deadline = time.monotonic() + ctx.config.recovery_timeout_s
    for _ in retry.tries():
        marked = start_recovery(ctx.store, ledger_id, retry)
        if marked.value.is_closed:
            return marked
        closed = RecoveryRun(ctx, marked, key, codec, deadline, retry).run()
        if closed is not None:
            log.info("ledger %d recovered: closed at entry %d", ledger_id, closed.value.last_entry_id)
            return closed
    raise RecoveryError(f"ledger {ledger_id}: its metadata kept changing during recovery; giving up after "
                        f"{retry.attempts} attempts")


class RecoveryRun:
    """One pass of the recovery state machine over real I/O."""

    def __init__(self, ctx: ClientContext, marked: Versioned[LedgerMetadata], key: bytes, codec: EntryCodec,
                 deadline: float, retry: RetryPolicy | None = None) -> None:
        self._ctx = ctx
        self._retry = retry_policy(ctx.config) if retry is None else retry
        self._marked = marked
        self._ledger_id = marked.value.ledger_id
        self._key = key
        self._codec = codec
        self._deadline = deadline
        self._recovery = LedgerRecovery(marked.value, ctx.config.recovery_read_window)
        self._step = read_step(marked.value.ensemble_size, marked.value.write_quorum)
        self._events: queue.Queue[Callable[[], tuple]] = queue.Queue()
        self._write_backs = WriteBacks(ctx, self._ledger_id, key, self._recovery, self._events.put)
        self._closed: Versioned[LedgerMetadata] | None = None
        self._finished = False

    def run(self) -> Versioned[LedgerMetadata] | None:
        """The CLOSED metadata, or None when the metadata changed under us (run again)."""
        self._handle(self._recovery.start())
        while not self._finished:
            remaining = self._deadline - time.monotonic()
            try:
                event = self._events.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise RecoveryError(f"recovery of ledger {self._ledger_id} did not finish within "
                                    f"{self._ctx.config.recovery_timeout_s} s (phase "
                                    f"{self._recovery.phase.value}); the ledger was left unclosed") from None
            self._handle(event())
        return self._closed

    def _handle(self, actions: tuple) -> None:
        reads, write_backs = [], []
        for action in actions:
            if isinstance(action, ReadEntry):
                reads.append(action)
            elif isinstance(action, WriteBack):
                write_backs.append(action)
            elif isinstance(action, FenceAndReadLac):
                self._fence(action)
            elif isinstance(action, ChooseReplacements):
                self._handle(self._choose(action))
            elif isinstance(action, CloseLedger):
                self._close(action.metadata)
            elif isinstance(action, RecoveryFailed):
                raise action.error()
        if write_backs:
            self._write_backs.send(write_backs)
        if reads:
            for run in coalesce(reads, self._step, self._ctx.config.read_batch_entries):
                self._read(run)

    def _when_done(self, future: Future, event: Callable[[Future], tuple]) -> None:
        future.add_done_callback(lambda done: self._events.put(lambda: event(done)))

    # --- actions ----------------------------------------------------------------------
    def _fence(self, action: FenceAndReadLac) -> None:
        first = self._marked.value.current_fragment.first_entry_id
        for bookie in action.targets:
            future = self._ctx.transport.read(bookie, self._ledger_id, first, first, fence=True,
                                              master_key=self._key, max_bytes=1,
                                              timeout=self._ctx.config.read_timeout_s)
            self._when_done(future, lambda done, b=bookie: self._recovery.on_lac_answer(b, _fence_answer(done)))

    def _read(self, run: RangeRead) -> None:
        future = self._ctx.transport.read(run.bookie_id, self._ledger_id, run.first_entry_id, run.last_entry_id,
                                          fence=run.fence, master_key=self._key,
                                          max_bytes=self._ctx.config.read_batch_bytes,
                                          timeout=self._ctx.config.read_timeout_s, entry_step=run.step)
        self._when_done(future, lambda done: self._on_range_answer(run, done))

    def _on_range_answer(self, run: RangeRead, done: Future) -> tuple:
        """Feed the answer back entry by entry (R9); read the rest of the run if recovery still waits for it."""
        recovery, bookie = self._recovery, run.bookie_id
        actions: list = []
        error = done.exception()
        if error is not None:  # nothing is known about any entry of the run from this bookie
            unknown = ReadAnswer.unknown(str(error))
            for entry_id in run.entry_ids:
                if recovery.awaiting(entry_id):
                    actions.extend(recovery.on_read_answer(entry_id, bookie, unknown))
            return tuple(actions)
        result = done.result()
        answered = 0
        for (entry_id, body), expected in zip(result.entries, run.entry_ids):
            if entry_id != expected:
                break
            answered += 1
            if recovery.awaiting(entry_id):  # a copy nobody waits for is not even verified
                actions.extend(recovery.on_read_answer(entry_id, bookie, self._entry_answer(entry_id, body)))
        if not answered:  # the status speaks for the first entry only
            if recovery.awaiting(run.first_entry_id):
                actions.extend(recovery.on_read_answer(run.first_entry_id, bookie, _status_answer(result)))
            answered = 1
        rest = run.rest_after(answered)
        while rest is not None and not recovery.awaiting(rest.first_entry_id):
            rest = rest.rest_after(1)
        if rest is not None:
            self._read(rest)
        return tuple(actions)

    def _choose(self, action: ChooseReplacements) -> tuple:
        try:
            chosen = self._ctx.choose_replacements(action.ensemble, action.failed,
                                                   set(action.exclude) | set(action.failed.values()),
                                                   quorums=Quorums.of(self._marked.value))
        except LedgerError as exc:
            return self._recovery.on_replacement_failure(str(exc))
        return self._recovery.on_replacements(chosen)

    def _close(self, closed: LedgerMetadata) -> None:
        self._finished = True
        self._closed = recovery_close(self._ctx.store, self._marked, closed, self._retry)
        if self._closed is None:
            log.info("ledger %d: metadata changed during recovery; recovering again", self._ledger_id)

    # --- answers ------------------------------------------------------------------------
    def _entry_answer(self, entry_id: int, body: bytes) -> ReadAnswer:
        try:
            decoded = self._codec.decode(body, self._ledger_id, entry_id)
        except CorruptEntryError as exc:
            return ReadAnswer.unknown(f"corrupt replica: {exc}")
        return ReadAnswer.present(body, decoded.length)


def _status_answer(result) -> ReadAnswer:
    """What a range answer without entries says about its first entry."""
    if result.status == BookieStatus.NO_SUCH_ENTRY:
        return ReadAnswer.no_such_entry()
    if result.status == BookieStatus.NO_SUCH_LEDGER:
        return ReadAnswer.no_such_ledger()
    return ReadAnswer.unknown(f"{result.status.name}: {result.message or 'no entry in the answer'}")


def _fence_answer(done: Future) -> LacAnswer:
    """A fencing read answers OK or NO_SUCH_ENTRY once the fence is durable; its LAC is the bookie's."""
    error = done.exception()
    if error is None and done.result().status in (BookieStatus.OK, BookieStatus.NO_SUCH_ENTRY):
        return LacAnswer.ok(max(-1, done.result().last_add_confirmed))
    return lac_answer(done)
