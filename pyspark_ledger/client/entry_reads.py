"""Fetching one batch of entries: a range read to one replica at a time, speculative reads, digests.

``RangeFetch`` drives ``protocol.reads.ReadPlan`` for the batch's first
entry: the plan says which replica to ask (first the start of the write set;
the next one when an answer is an error, a "no such entry" or a corrupt
entry, or -- speculatively -- when no answer came within
``speculative_read_delay_s``, counted from when the reader waits for the
batch, ``time_it``, stopped by the arrival of an answer, and started again
whenever an answer of any of the reader's reads arrives or is verified
(``ReadStats.answered``, ``read_rules.slow_after``), and, while the reader
has other reads out, not before a read sent after the replica was asked has
been answered: docs/protocol.md L7).
A replica's answer is used from its first
entry on for as long as the entries verify (digest, ledger and entry ids);
the first corrupt one ends it, so the caller continues from there with a new
fetch (docs/protocol.md L5). A stripe of a striped ledger (``protocol.stripes``: every E-th
entry, all with one write set) is fetched the same way, as one strided range
read (``entry_step``). Payloads are copied out of the answer unless ``copy=False``
(then they are read-only views into it). ``result`` is a Future of the verified ``LedgerEntry`` list, or
fails with NoSuchEntryError (an explicit absence of a confirmed entry),
CorruptEntryError (every replica corrupt) or BookieUnavailableError.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.read_stats import ReadStats
from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.entry import EntryCodec
from pyspark_ledger.errors import BookieUnavailableError, CorruptEntryError, NoSuchEntryError
from pyspark_ledger.protocol.answers import ReadAnswer
from pyspark_ledger.protocol.read_rules import ReadBatch, slow_after
from pyspark_ledger.protocol.reads import ReadPlan, ReadStepKind

log = logging.getLogger(__name__)
_CORRUPT = "corrupt replica"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One entry as read: its id and payload (a read-only memoryview if read with ``copy=False``)."""

    entry_id: int
    data: bytes | memoryview


class RangeFetch:
    """Reads the entries of one ``ReadBatch`` (see the module docstring)."""

    #: A fetch makes no progress of its own before its ``result`` is done (see ``StripedFetch.progress``).
    progress = 0

    def __init__(self, ctx: ClientContext, ledger_id: int, codec: EntryCodec, batch: ReadBatch,
                 write_quorum: int, ack_quorum: int, *, copy: bool = True, master_key: bytes,
                 max_bytes: int | None = None, stats: ReadStats | None = None) -> None:
        self._ctx = ctx
        self._stats = ReadStats() if stats is None else stats
        self._max_bytes = ctx.config.read_batch_bytes if max_bytes is None else max_bytes
        self._key = master_key
        self._copy = copy
        self._ledger_id = ledger_id
        self._codec = codec
        self.batch = batch
        self._plan = ReadPlan(batch.first_entry_id, batch.ensemble, write_quorum, ack_quorum)
        self._lock = threading.RLock()
        self._timers: list = []
        self._waiting: dict[str, float] = {}  # replica asked -> when, until its answer arrives or the read is decided
        self._timed = False  # whether a replica asked gets a speculative read when slow (L7)
        self._decided = False  # set under the lock before ``result`` is: no timer is armed after it
        self._corrupt = 0
        self.result: "Future[list[LedgerEntry]]" = Future()

    def start(self, *, timed: bool = True) -> "RangeFetch":
        """Send the first range read. Untimed (a batch read ahead), no speculative read goes out before
        ``time_it``."""
        with self._lock:
            self._timed = self._timed or timed
            self._ask(self._plan.first().bookie)
        return self

    def time_it(self) -> None:
        """The reader now waits for this batch: start the speculative-read clock of every replica asked and
        not yet answered (docs/protocol.md L7). Idempotent."""
        with self._lock:
            if self._timed or self._decided:
                return
            self._timed = True
            for bookie in self._plan.unanswered():
                self._arm(bookie)

    def _ask(self, bookie: str) -> None:
        config = self._ctx.config
        future = self._ctx.transport.read(bookie, self._ledger_id, self.batch.first_entry_id,
                                          self.batch.last_entry_id, master_key=self._key,
                                          max_bytes=self._max_bytes, timeout=config.read_timeout_s,
                                          entry_step=self.batch.step)
        self._waiting[bookie] = self._stats.clock()
        self._stats.sent(bookie)
        if self._timed:
            self._arm(bookie)
        future.add_done_callback(lambda done: self._on_answer(bookie, done))

    def _arm(self, bookie: str, timed_at: float | None = None, wait: float | None = None) -> None:
        delay = self._ctx.config.speculative_read_delay_s
        if delay is not None:
            timed_at = self._stats.clock() if timed_at is None else timed_at
            self._timers.append(self._ctx.scheduler.call_later(
                delay if wait is None else wait, lambda: self._speculate(bookie, timed_at)))

    def _speculate(self, bookie: str, timed_at: float) -> None:
        with self._lock:
            if self._decided or bookie not in self._plan.unanswered():
                return
            wait = slow_after(self._ctx.config.speculative_read_delay_s, timed_at, self._stats.last_answer,
                              self._stats.clock(), sent_at=self._waiting[bookie],
                              newest_answered_sent_at=self._stats.newest_answered_sent,
                              others_in_flight=self._stats.others_in_flight(bookie, self._waiting))
            if wait > 0:  # the reader's reads made progress, or none sent after it answered yet: its own load (L7)
                self._arm(bookie, timed_at, wait)
                return
            following = self._plan.speculative_replica_after(bookie)
            if following is not None:
                log.debug("ledger %d entry %d: speculative read to %s after %s was slow", self._ledger_id,
                          self.batch.first_entry_id, following, bookie)
                self._stats.count("speculative_reads")
                self._ask(following)

    def _on_answer(self, bookie: str, done: Future) -> None:
        self._stats.answered()
        if self.result.done():  # a late (e.g. speculative) answer: verifying and copying it would be wasted
            self._stats.count("late_answers")
            return
        with self._lock:
            if self._decided:
                self._stats.count("late_answers")
                return
            self._plan.arrived(bookie)  # from now on the time is ours (verifying), not the replica's: L7
            sent_at = self._waiting.pop(bookie, None)
            if sent_at is not None:
                self._stats.left((bookie,))
                self._stats.answered(sent_at)
        entries, answer = self._classify(bookie, done)
        self._stats.answered()  # verifying was the client's own work (L7)
        with self._lock:
            if self._decided:  # another answer decided it (its thread may not have set ``result`` yet)
                return
            if answer.reason.startswith(_CORRUPT):
                self._corrupt += 1
            step = self._plan.on_answer(bookie, answer)
            if step.kind is ReadStepKind.SEND:
                self._ask(step.bookie)
                return
            if step.kind is ReadStepKind.WAIT:
                return
            outcome, error = self._final(step, entries)
            self._decided = True
            for timer in self._timers:
                timer.cancel()
            self._stats.left(self._waiting)  # their answers no longer matter: not the reader's load (L7)
            self._waiting.clear()
        if error is not None:
            self.result.set_exception(error)
        else:
            self.result.set_result(outcome)

    def _final(self, step, entries: list[LedgerEntry]):
        first = self.batch.first_entry_id
        if step.kind is ReadStepKind.DONE:
            return entries, None
        if step.kind is ReadStepKind.NO_SUCH_ENTRY:
            return None, NoSuchEntryError(
                f"entry {first} of ledger {self._ledger_id} is confirmed, yet enough replicas say it does not "
                f"exist that it cannot be anywhere: entries were lost ({step.reason})")
        text = f"cannot read entry {first} of ledger {self._ledger_id} from any replica: {step.reason}"
        if self._corrupt and self._corrupt == len(self._plan.replicas):
            return None, CorruptEntryError(text)
        return None, BookieUnavailableError(text, status=BookieStatus.UNAVAILABLE)

    def _classify(self, bookie: str, done: Future) -> tuple[list[LedgerEntry], ReadAnswer]:
        """Verified entries from the batch's first one on, and what the answer says about the first."""
        error = done.exception()
        if error is not None:
            self._stats.count("error_answers")
            return [], ReadAnswer.unknown(str(error))
        result = done.result()
        if result.status == BookieStatus.NO_SUCH_ENTRY:
            return [], ReadAnswer.no_such_entry()
        if result.status == BookieStatus.NO_SUCH_LEDGER:
            return [], ReadAnswer.no_such_ledger()
        if result.status != BookieStatus.OK:
            return [], ReadAnswer.unknown(f"{result.status.name}: {result.message}")
        return self._verified(bookie, result.entries)

    def _verified(self, bookie: str, answered) -> tuple[list[LedgerEntry], ReadAnswer]:
        entries: list[LedgerEntry] = []
        answer = ReadAnswer.unknown("the answer held no entries")
        expected = self.batch.first_entry_id
        step = self.batch.step
        for entry_id, body in answered:
            if entry_id != expected or entry_id > self.batch.last_entry_id:
                break
            try:
                decoded = self._codec.decode(body, self._ledger_id, entry_id, copy=self._copy)
            except CorruptEntryError as exc:
                log.warning("ledger %d entry %d from bookie %s: %s", self._ledger_id, entry_id, bookie, exc)
                if not entries:
                    answer = ReadAnswer.unknown(f"{_CORRUPT}: {exc}")
                break
            if not entries:
                answer = ReadAnswer.present(body, decoded.length)
            entries.append(LedgerEntry(entry_id, decoded.payload))
            expected += step
        return entries, answer
