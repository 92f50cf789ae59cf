"""The reader's handle of one ledger: batched, pipelined range reads; the LAC; long polls.

``open_reader`` recovers the ledger first when asked to (``recovery_op``),
else reads its LAC with coverage. ``read(first, last)`` yields entries in
order, keeping ``read_ahead_batches`` batches in flight (timed for speculative
reads only once the reader waits for them, docs/protocol.md L7): one range read each
(``entry_reads``), or, for a striped ledger (E > Qw, where no bookie stores
every entry), one strided range read per write set, in parallel
(``striped_reads``); the range must lie within ``readable_last_entry``
(protocol ``read_rules``).
A tailing reader calls ``wait_for_entry`` / ``read_last_add_confirmed``, which
re-read the metadata first (new fragments, a close) and never lower the LAC.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Iterator

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.entry_reads import LedgerEntry, RangeFetch
from pyspark_ledger.client.lac_reads import poll_lac, read_lac
from pyspark_ledger.client.read_stats import ReadStats
from pyspark_ledger.client.recovery_op import recover_ledger
from pyspark_ledger.client.striped_reads import StripedFetch
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import BookieUnavailableError, InvalidArgumentError, NoSuchEntryError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.protocol.read_rules import (advance_lac, check_read_range, lac_floor, plan_batches,
                                                readable_last_entry)
from pyspark_ledger.protocol.stripes import stripes_per_batch

__all__ = ["LedgerEntry", "LedgerReader", "open_reader"]


def open_reader(ctx: ClientContext, stored: Versioned[LedgerMetadata], password: bytes,
                recovery: bool) -> "LedgerReader":
    if recovery and not stored.value.is_closed:
        stored = recover_ledger(ctx, stored, master_key(password), EntryCodec(stored.value.digest_type, password))
    reader = LedgerReader(ctx, stored.value, password)
    if not stored.value.is_closed:
        reader.read_last_add_confirmed()
    return reader


class LedgerReader:
    """Reads one ledger (see the module docstring). Thread-safe for concurrent ``read`` calls."""

    def __init__(self, ctx: ClientContext, md: LedgerMetadata, password: bytes) -> None:
        self._ctx = ctx
        self._md = md
        self._codec = EntryCodec(md.digest_type, password)
        self._key = master_key(password)  # every read and LAC read carries it: bookies refuse them without
        self._lac = md.last_entry_id if md.is_closed else lac_floor(md)
        self._stats = ReadStats()

    @property
    def ledger_id(self) -> int:
        return self._md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._md.is_closed

    @property
    def read_stats(self) -> dict[str, int]:
        """This reader's range reads so far: sent, sent speculatively, answers too late to use (``read_stats``)."""
        return self._stats.snapshot()

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known readable (the last entry once the ledger is closed)."""
        return readable_last_entry(self._md, self._lac)

    def read(self, first: int = 0, last: int | None = None, *, copy: bool = True) -> Iterator[LedgerEntry]:
        """Entries ``first..last`` in order (``last`` defaults to ``last_add_confirmed``;
        nothing then if ``first`` is beyond it).

        Each entry's ``data`` is ``bytes``; with ``copy=False`` it is a read-only
        ``memoryview`` into the bookie's answer, saving a copy of every payload
        (for callers that only parse it, e.g. into Arrow buffers).
        NoSuchEntryError if ``last`` is beyond what may be read yet.
        """
        readable = self.last_add_confirmed
        if last is None:
            if isinstance(first, int) and first > readable:
                return iter(())
            last = readable
        check_read_range(self.ledger_id, first, last, readable)
        return self._read(first, last, bool(copy))

    def read_last_add_confirmed(self) -> int:
        """Re-read the metadata and the LAC (with coverage); returns the new ``last_add_confirmed``."""
        self._refresh_metadata()
        if not self._md.is_closed:
            lac = read_lac(self._ctx, self._md, self._key)
            self._refresh_metadata()  # see _refresh_metadata
            self._lac = advance_lac(self._lac, lac)
        return self.last_add_confirmed

    def wait_for_entry(self, entry_id: int, timeout: float = 5.0) -> bool:
        """Long-poll until ``entry_id`` is readable (True) or ``timeout`` passes (False).

        NoSuchEntryError if the ledger was closed before that entry.
        """
        if isinstance(entry_id, bool) or not isinstance(entry_id, int) or entry_id < 0:
            raise InvalidArgumentError(f"entry id must be an integer >= 0, got {entry_id!r}")
        deadline = time.monotonic() + timeout
        while self.last_add_confirmed < entry_id:
            self._refresh_metadata()
            if self._md.is_closed:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            wait = min(remaining, self._ctx.config.long_poll_timeout_s)
            lac = poll_lac(self._ctx, self._md, self._key, self.last_add_confirmed, wait)
            self._refresh_metadata()
            self._lac = advance_lac(self._lac, lac)
        if self.last_add_confirmed < entry_id:
            raise NoSuchEntryError(f"ledger {self.ledger_id} was closed at entry {self._md.last_entry_id}: "
                                   f"entry {entry_id} will never exist")
        return True

    def close(self) -> None:
        """Readers hold no resources of their own; kept for symmetry with writers."""

    def __enter__(self) -> "LedgerReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ---------------------------------------------------------------
    def _refresh_metadata(self) -> None:
        """Re-read the metadata. Done again *after* each LAC read: a writer stores a new fragment
        before sending it any entry, so metadata read after learning a LAC names the fragment of
        every entry up to that LAC (else a stale ensemble could answer "no such entry")."""
        self._md = self._ctx.store.read_ledger(self.ledger_id).value

    def _read(self, first: int, last: int, copy: bool) -> Iterator[LedgerEntry]:
        md = self._md
        per_read = self._ctx.config.read_batch_entries
        batches = plan_batches(md, first, last, per_read * stripes_per_batch(md.ensemble_size, md.write_quorum))
        window: deque[RangeFetch | StripedFetch] = deque()
        wait_s = self._ctx.config.read_timeout_s * (md.write_quorum + 1) + 5.0
        while True:
            while len(window) < self._ctx.config.read_ahead_batches:
                batch = next(batches, None)
                if batch is None:
                    break
                window.append(self._fetch(batch, copy))
            if not window:
                return
            fetch = window.popleft()
            fetch.time_it()  # read ahead untimed; slow from now on (docs/protocol.md L7)
            try:
                entries = _outcome(fetch, wait_s)
            except TimeoutError as exc:
                raise BookieUnavailableError(f"reading entries {fetch.batch.first_entry_id}.."
                                             f"{fetch.batch.last_entry_id} of ledger {self.ledger_id} took over "
                                             f"{wait_s:.0f} s", status=BookieStatus.TIMEOUT) from exc
            rest = _remainder(fetch, entries)
            if rest is not None:
                window.appendleft(self._fetch(rest, copy))
            yield from entries

    def _fetch(self, batch, copy: bool) -> RangeFetch | StripedFetch:
        md = self._md
        kind = RangeFetch if len(batch.ensemble) == md.write_quorum else StripedFetch
        return kind(self._ctx, self.ledger_id, self._codec, batch, md.write_quorum, md.ack_quorum,
                    copy=copy, master_key=self._key, stats=self._stats).start(timed=False)


def _outcome(fetch: RangeFetch | StripedFetch, wait_s: float) -> list[LedgerEntry]:
    """The fetch's entries; TimeoutError once ``wait_s`` passed without an answer (a striped fetch reads on in
    rounds: each answer gives it another ``wait_s``)."""
    while True:
        progress = fetch.progress
        try:
            return fetch.result.result(timeout=wait_s)
        except TimeoutError:
            if fetch.progress == progress:
                raise


def _remainder(fetch: RangeFetch | StripedFetch, entries: list[LedgerEntry]):
    """The part of the batch a short answer did not cover (max bytes, striping, a corrupt entry)."""
    batch = fetch.batch
    got_to = entries[-1].entry_id if entries else batch.first_entry_id - 1
    if got_to >= batch.last_entry_id:
        return None
    if not entries:
        raise NoSuchEntryError(f"no entry {batch.first_entry_id} of ledger in the answer")
    return type(batch)(got_to + 1, batch.last_entry_id, batch.ensemble)
