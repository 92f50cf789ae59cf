"""The single writer of one partition's log: open (fence, create, CAS), append, roll, close.

Opening first verifies the password against the stream's (``stream_password``):
another password fails with UnauthorizedError before any ledger is touched.
So do a stream record whose replication breaks E >= Qw >= Qa >= 1 and fewer
writable bookies registered than the stream's ensemble size (one line naming
``ensemble_size`` and how many bookies are live: ``writable_bookies``): the
log's current writer is not fenced by a writer that could not write.
Then it follows docs/protocol.md G1: read the partition's ledger list,
fence its last two ledgers (a recovery open: a writer still appending to
either fails as fenced), create a new ledger, and add it to the list by
compare-and-set. If another writer added a ledger in between, the new ledger
is discarded and the steps start again (or, when ``is_leader`` says this
process is no longer the leader, the open fails). Nothing is written before
the compare-and-set succeeds.

Rolling (when the ``RollPolicy`` says so, checked on each append, or on
``roll()``): create a ledger, add it to the list by compare-and-set, switch
appends to it, then close the previous ledger. A policy roll runs on a
background thread while appends continue into the current ledger; its failure
stops the writer and surfaces on the next append and on ``close()``. A lost
compare-and-set while rolling means another writer took the log over: the
writer stops with LedgerFencedError.

A partition is written either by one ``LogWriter`` or by ``commit_ledgers``
(Spark sinks), not both: a commit to the partition also deposes its writer.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pyspark_ledger.client.closing import close_leaving_block
from pyspark_ledger.errors import (InvalidConfigurationError, LedgerClosedError, LedgerError, LedgerFencedError,
                                   MetadataError, MetadataVersionConflictError)
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_partition
from pyspark_ledger.log.ledgers import create_stream_ledger, discard_writer, fence_ledgers
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.log_transitions import add_ledger, check_active
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.log.stream_password import check_record, verify_password
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.log.writable_bookies import check_bookies_for_write, check_stream_replication
from pyspark_ledger.metadata.update_loop import RetryPolicy

if TYPE_CHECKING:  # annotations only: reading metadata must not import the gRPC client
    from pyspark_ledger.client.writer import LedgerWriter

log = logging.getLogger(__name__)
#: opening starts again when another writer added a ledger first (docs/protocol.md G1)
OPEN_RETRY = RetryPolicy(attempts=20)
FENCED_TAIL = 2  # docs/protocol.md G1: the writer may be writing the second-to-last ledger while adding the last


@dataclass(frozen=True, slots=True)
class RollPolicy:
    """When to roll to a new ledger: after ``max_entries`` entries, ``max_bytes`` payload bytes, or
    ``max_age_s`` seconds since the ledger was opened (checked on appends). None: no limit."""

    max_entries: int | None = None
    max_bytes: int | None = None
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_entries", "max_bytes", "max_age_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
                                      or (name != "max_age_s" and not isinstance(value, int))):
                kind = "a number of seconds" if name == "max_age_s" else "an integer"
                raise InvalidConfigurationError(f"RollPolicy.{name} must be {kind} > 0 or None, got {value!r}")

    def due(self, entries: int, size: int, age_s: float) -> bool:
        """Whether a ledger holding ``entries`` entries of ``size`` bytes, ``age_s`` old, should roll."""
        if entries <= 0:
            return False
        return any(limit is not None and value >= limit for limit, value in
                   ((self.max_entries, entries), (self.max_bytes, size), (self.max_age_s, age_s)))


def open_log_writer(ctx: LogContext, stream: str, partition: int, policy: RollPolicy | None = None, *,
                    is_leader: Callable[[], bool] | None = None,
                    clock: Callable[[], float] = time.monotonic, retry: RetryPolicy = OPEN_RETRY) -> "LogWriter":
    """Become the single writer of a partition's log (see the module docstring); ``retry`` bounds and
    paces the new starts after another writer added a ledger first."""
    policy = RollPolicy() if policy is None else policy
    verify_password(ctx, stream, write=True)  # before any ledger is fenced or created
    for _ in retry.tries():
        record = check_active(read_stream(ctx.store, stream).value)
        check_partition(partition, record.partition_count, stream)
        # before fencing anything: a writer that could not write must not depose the current one
        check_stream_replication(stream, record.replication)
        check_bookies_for_write(ctx.store, ctx.store.uri, stream, record.replication, stream_exists=True,
                                min_ack_zones=ctx.client.config.min_ack_quorum_zones)
        part = record.partition(partition)
        fence_ledgers(ctx.client, part.ledger_ids[-FENCED_TAIL:], ctx.password)
        writer = create_stream_ledger(ctx.client, record.replication, ctx.password, stream, partition)
        try:
            seq = _add_to_log(ctx, stream, partition, writer.ledger_id, part.next_seq)
        except MetadataVersionConflictError:
            discard_writer(ctx.client, writer, ctx.password, "another writer added a ledger first")
            if is_leader is not None and not is_leader():
                raise LedgerFencedError(f"partition {partition} of stream {stream!r}: another writer took the log "
                                        "and this one is no longer the leader") from None
            continue
        except BaseException:
            writer.abort("the log could not be opened")  # outcome unknown: leave the ledger, never delete
            raise
        log.info("stream %r partition %d: writing ledger %d (sequence %d)", stream, partition, writer.ledger_id, seq)
        return LogWriter(ctx, stream, partition, record.replication, writer, seq, policy, clock)
    raise MetadataError(f"could not open partition {partition} of stream {stream!r} for writing in "
                        f"{retry.attempts} attempts: other writers keep adding ledgers to it")


def _add_to_log(ctx: LogContext, stream: str, partition: int, ledger_id: int, expected_next_seq: int) -> int:
    """CAS the new ledger into the log; it must still exist after each read (see ``orphans``)."""
    def transition(record):
        check_record(ctx, record)  # the stream may have been created anew, with another password
        after = add_ledger(record, partition, ledger_id, expected_next_seq)[0]
        ctx.client.ledger_metadata(ledger_id)  # NoSuchLedgerError if an orphan sweep deleted it
        return after

    update_stream(ctx.store, stream, transition)
    return expected_next_seq


class LogWriter:
    """Appends to one partition's log (see the module docstring); a context manager."""

    def __init__(self, ctx: LogContext, stream: str, partition: int, replication: Replication,
                 writer: LedgerWriter, seq: int, policy: RollPolicy, clock: Callable[[], float]) -> None:
        self._ctx, self.stream, self.partition = ctx, stream, partition
        self._replication, self._policy, self._clock = replication, policy, clock
        self._lock = threading.Lock()
        self._roll_lock = threading.Lock()
        self._writer, self._seq = writer, seq
        self._entries = self._bytes = 0
        self._opened_at = clock()
        self._roll_thread: threading.Thread | None = None
        self._failure: LedgerError | None = None
        self._closed = False
        self._close_error: LedgerError | None = None

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    @property
    def ledger_seq(self) -> int:
        """The sequence number of the ledger appends go to now."""
        return self._seq

    def append(self, data: bytes) -> LogPosition:
        """Append one entry; its position once it is confirmed."""
        return self.append_async(data).result()

    def append_async(self, data: bytes) -> "Future[LogPosition]":
        """Queue one entry; the future resolves to its position (or fails, e.g. LedgerFencedError)."""
        with self._lock:
            self._check_usable()
            seq, confirmed = self._seq, self._writer.append_async(data)
            self._entries += 1
            self._bytes += len(data)
            if self._roll_thread is None and self._policy.due(self._entries, self._bytes,
                                                              self._clock() - self._opened_at):
                self._roll_thread = threading.Thread(target=self._roll_in_background, daemon=True,
                                                     name=f"roll-{self.stream}-{self.partition}")
                self._roll_thread.start()
        return _positioned(confirmed, seq)

    def roll(self) -> int:
        """Roll now (create, CAS, switch, close the previous ledger); the new ledger's sequence number."""
        with self._lock:
            self._check_usable()
        try:
            seq = self._roll()
        except LedgerError as exc:
            self._fail(exc)
            raise
        if seq is None:
            raise LedgerClosedError(f"the log writer of stream {self.stream!r} partition {self.partition} was "
                                    "closed before it could roll: open a new one")
        return seq

    def close(self) -> None:
        """Wait for a roll in progress (in the background or a ``roll()`` on another thread), then close the
        current ledger. Idempotent.

        LedgerFencedError if another writer fenced the ledger (or took the log over);
        a failure of a background roll is raised here too.
        """
        with self._lock:
            first, self._closed = not self._closed, True
            thread = self._roll_thread
        if not first:
            if self._close_error is not None:
                raise self._close_error
            return
        if thread is not None:
            thread.join()
        with self._roll_lock:  # a roll() on another thread ends first, and none starts after
            try:
                self._writer.close()
            except LedgerError as exc:
                self._close_error = self._failure or exc
            else:
                self._close_error = self._failure
        if self._close_error is not None:
            raise self._close_error

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_leaving_block(self.close, exc_type is not None, log,
                            f"the log writer of {self.stream!r}/{self.partition}")

    # --- rolling ---------------------------------------------------------------------
    def _roll(self) -> int | None:
        """Roll; None, with no new ledger, if the writer was closed meanwhile."""
        with self._roll_lock:
            with self._lock:
                if self._closed:
                    return None
            new = create_stream_ledger(self._ctx.client, self._replication, self._ctx.password, self.stream,
                                       self.partition)
            try:
                seq = _add_to_log(self._ctx, self.stream, self.partition, new.ledger_id, self._seq + 1)
            except MetadataVersionConflictError as exc:
                discard_writer(self._ctx.client, new, self._ctx.password, "the log was taken over")
                raise LedgerFencedError(f"partition {self.partition} of stream {self.stream!r}: another writer "
                                        f"took the log over ({exc})") from exc
            except BaseException:
                new.abort("rolling failed")
                raise
            with self._lock:
                old, self._writer, self._seq = self._writer, new, seq
                self._entries = self._bytes = 0
                self._opened_at = self._clock()
            log.debug("stream %r partition %d rolled to ledger %d", self.stream, self.partition, new.ledger_id)
            old.close()
            return seq

    def _roll_in_background(self) -> None:
        try:
            self._roll()
        except LedgerError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - kept and surfaced by the next append and close()
            self._fail(LedgerClosedError(f"rolling the log of {self.stream!r}/{self.partition} failed: {exc!r}"))
        finally:
            with self._lock:
                self._roll_thread = None

    def _fail(self, error: LedgerError) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
                log.warning("log writer of %r/%d stopped: %s", self.stream, self.partition, error)

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(f"the log writer of stream {self.stream!r} partition {self.partition} "
                                      f"stopped: {self._failure}")
        if self._closed:
            raise LedgerClosedError(f"the log writer of stream {self.stream!r} partition {self.partition} is "
                                    "closed: open a new one")


def _positioned(confirmed: "Future[int]", seq: int) -> "Future[LogPosition]":
    """A future of the entry's log position from the ledger writer's future of its entry id."""
    result: Future = Future()

    def done(future: Future) -> None:
        error = future.exception()
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(LogPosition(seq, future.result()))

    confirmed.add_done_callback(done)
    return result
