"""Reading one partition's log in order, across ledger boundaries, from a position.

A reader verifies the password against the stream's when it is made
(``stream_password``): another one fails with UnauthorizedError.
``LogReader`` keeps the position of the next entry to read. ``entries()``
yields every entry readable now, ledger after ledger: a closed ledger to its
last entry, then on to the next one; an open ledger to its last add confirmed
(it never fences: the writer is undisturbed), and never past it, since later
ledgers may only be read once it is closed. ``wait_for_entries`` long-polls an
open ledger, or polls the stream record for a new ledger.

A position the log no longer holds raises DataLossError naming the stream,
the partition, the position and where the log now starts: it was truncated
away (retention, overwrite), it lies beyond the end of the log, or the stream
was deleted and created anew since the reader started. The end slot of the
newest truncated ledger is not lost: that ledger had been read to its end.

A ledger the log still lists but whose metadata is gone (deleted by hand,
``ledger ledgers delete --force``) is *lost*: with ``fail_on_data_loss``
(the default) the reader raises DataLossError naming the ledger and the
positions it held; without, it logs a warning naming the stream, partition,
ledger and the range skipped, and reads on from the next ledger.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from pyspark_ledger.errors import (DataLossError, InvalidArgumentError, InvalidConfigurationError, NoSuchEntryError,
                                   NoSuchLedgerError)
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_partition
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import check_active
from pyspark_ledger.log.log_views import is_lost, partition_log
from pyspark_ledger.log.positions import EARLIEST, LogPosition, parse_position
from pyspark_ledger.log.stream_password import verify_password
from pyspark_ledger.log.stream_store import read_stream

if TYPE_CHECKING:  # annotations only: reading metadata must not import the gRPC client
    from pyspark_ledger.client.reader import LedgerReader

log = logging.getLogger(__name__)
DEFAULT_POLL_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of a log: where it is, which ledger holds it, its payload."""

    position: LogPosition
    ledger_id: int
    data: bytes


class LogReader:
    """Reads a partition's log from ``start`` (EARLIEST, LATEST or a position); see the module docstring."""

    def __init__(self, ctx: LogContext, stream: str, partition: int, start=EARLIEST, *,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S, fail_on_data_loss: bool = True) -> None:
        if not isinstance(fail_on_data_loss, bool):
            raise InvalidConfigurationError(f"fail_on_data_loss must be True or False, got {fail_on_data_loss!r}")
        if isinstance(poll_interval_s, bool) or not isinstance(poll_interval_s, (int, float)) or poll_interval_s <= 0:
            raise InvalidConfigurationError(f"poll_interval_s must be a number of seconds > 0, got {poll_interval_s!r}")
        self._ctx, self.stream, self.partition = ctx, stream, partition
        self._poll_interval_s = poll_interval_s
        self._fail_on_data_loss = fail_on_data_loss
        self._readers: dict[int, LedgerReader] = {}
        record = check_active(verify_password(ctx, stream, write=False))
        check_partition(partition, record.partition_count, stream)
        self._uid = record.uid
        self._position = self._resolve(parse_position(start, what="start position"), record)
        self._check(record)

    @property
    def position(self) -> LogPosition:
        """The position of the next entry to read."""
        return self._position

    def read(self, max_entries: int | None = None) -> list[LogEntry]:
        """The entries readable now (at most ``max_entries``), in order."""
        return list(self.entries(max_entries))

    def entries(self, max_entries: int | None = None) -> Iterator[LogEntry]:
        """Yield the entries readable now, in order; the position advances as they are yielded."""
        if max_entries is not None and (isinstance(max_entries, bool) or not isinstance(max_entries, int)
                                        or max_entries < 1):
            raise InvalidArgumentError(f"max_entries must be an integer >= 1 or None, got {max_entries!r}")
        return self._entries(max_entries)

    def _entries(self, left: int | None) -> Iterator[LogEntry]:
        record = self._refresh()
        while left is None or left > 0:
            try:
                span = self._readable_span(record)
            except NoSuchLedgerError:
                record = self._refresh()  # raises DataLossError if it was truncated away
                span = self._readable_span(record)
            if span is None:
                return
            ledger_id, first, last = span
            if left is not None:
                last = min(last, first + left - 1)
            seq = self._position.ledger_seq
            for entry in self._readers[ledger_id].read(first, last):
                self._position = LogPosition(seq, entry.entry_id + 1)
                left = None if left is None else left - 1
                yield LogEntry(LogPosition(seq, entry.entry_id), ledger_id, entry.data)

    def wait_for_entries(self, timeout: float = 5.0) -> bool:
        """Wait (at most ``timeout`` s) until an entry is readable at the position; whether one is."""
        deadline = time.monotonic() + timeout
        while True:
            record = self._refresh()
            if self._readable_span(record) is not None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            reader = self._current_reader(record)
            if reader is not None and not reader.is_closed:
                try:
                    reader.wait_for_entry(self._position.entry_id, min(remaining, 1.0))
                except NoSuchEntryError:
                    pass  # closed before that entry: the next ledger follows
            else:
                time.sleep(min(self._poll_interval_s, remaining))  # a new ledger is added by CAS elsewhere

    # --- internals -------------------------------------------------------------------
    def _resolve(self, start: LogPosition, record: StreamRecord) -> LogPosition:
        if start.is_earliest:
            return LogPosition(record.partition(self.partition).first_seq, 0)
        if start.is_latest:
            return partition_log(self._ctx, record, self.partition).end
        return start

    def _refresh(self) -> StreamRecord:
        record = read_stream(self._ctx.store, self.stream).value
        self._check(record)
        return record

    def _check(self, record: StreamRecord) -> None:
        """Raise DataLossError if the log no longer holds the position."""
        where = f"stream {self.stream!r} partition {self.partition}"
        if record.uid != self._uid:
            raise DataLossError(f"{where}: the stream was deleted and created anew since this reader started at "
                                "its old incarnation; positions in the old stream mean nothing in the new one")
        part, position = record.partition(self.partition), self._position
        start = LogPosition(part.first_seq, 0)
        if position.ledger_seq < part.first_seq:
            if position == part.truncated_end:
                self._position = start
                return
            raise DataLossError(f"{where}: the log was truncated and now starts at {start}; the entries from "
                                f"{position} up to {start} are gone. Read from {start} (or 'earliest') instead")
        if position.ledger_seq > part.next_seq or (position.ledger_seq == part.next_seq and position.entry_id > 0):
            raise DataLossError(f"{where}: the position {position} lies beyond the end of the log (its next ledger "
                                f"is {part.next_seq}); was the stream deleted and written anew?")

    def _skip_lost(self, ledger_id: int) -> None:
        """The position's ledger is lost: raise DataLossError, or warn and move to the next ledger."""
        position = self._position
        after = position.next_ledger()
        what = (f"stream {self.stream!r} partition {self.partition}: ledger {ledger_id} (sequence number "
                f"{position.ledger_seq} of the log) is lost (its metadata was deleted), so positions {position} "
                f"up to {after} cannot be read")
        if self._fail_on_data_loss:
            raise DataLossError(f"{what}. Read with fail_on_data_loss=False to skip that range, or drop the lost "
                                f"ledger from the stream (ledger streams repair {self.stream})")
        log.warning("%s; skipping them (fail_on_data_loss=False)", what)
        self._position = after

    def _current_reader(self, record: StreamRecord) -> LedgerReader | None:
        ref = record.partition(self.partition).ledger_at(self._position.ledger_seq)
        if ref is None:
            return None
        reader = self._readers.get(ref.ledger_id)
        if reader is None:
            reader = self._ctx.client.open_ledger(ref.ledger_id, self._ctx.password, recovery=False)
            self._readers = {ref.ledger_id: reader}  # earlier ledgers are done with
        elif not reader.is_closed:
            reader.read_last_add_confirmed()
        return reader

    def _readable_span(self, record: StreamRecord) -> tuple[int, int, int] | None:
        """(ledger id, first, last) readable at the position, moving past read-out closed ledgers."""
        while True:
            try:
                reader = self._current_reader(record)
            except NoSuchLedgerError:
                ledger_id = record.partition(self.partition).ledger_at(self._position.ledger_seq).ledger_id
                if not is_lost(self._ctx, record, self.partition, ledger_id):
                    raise  # truncated away meanwhile: the caller reads the record again
                self._skip_lost(ledger_id)
                continue
            if reader is None:
                return None
            position, last = self._position, reader.last_add_confirmed
            if position.entry_id <= last:
                return reader.ledger_id, position.entry_id, last
            if not reader.is_closed:
                return None
            if position.entry_id > last + 1:
                raise DataLossError(f"stream {self.stream!r} partition {self.partition}: ledger {position.ledger_seq} "
                                    f"of the log ends at entry {last}, before the position {position}")
            self._position = position.next_ledger()
