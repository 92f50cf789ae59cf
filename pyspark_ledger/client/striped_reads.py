"""Fetching one batch of a striped ledger (E > Qw): one strided range read per write set, in parallel.

``protocol.stripes.split_batch`` cuts the batch into stripes (every E-th
entry, all stored by one write set); each stripe is read by a ``RangeFetch``
(which asks the stripe's replicas in write-set order, falls back to the next
one on an error, a "no such entry", a corrupt entry or a slow answer, and
verifies every entry). A stripe whose answer is short (its share of
``read_batch_bytes``, or an entry its replica could not give) goes on with a
new ``RangeFetch`` for the rest of it while the batch holds less than
``read_batch_bytes`` (a batch's memory stays bounded by the bytes, not by its
count of entries). Once every stripe is read, stopped or failed,
``result`` holds the batch's entries in order up to the first one no stripe
could read (``stripes.merged_prefix``): the caller continues from there with
a new fetch, as after a short answer of a contiguous read. A batch whose very
first entry could not be read fails with that stripe's error
(NoSuchEntryError, CorruptEntryError or BookieUnavailableError).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.entry_reads import LedgerEntry, RangeFetch
from pyspark_ledger.client.read_stats import ReadStats
from pyspark_ledger.entry import EntryCodec
from pyspark_ledger.protocol.read_rules import ReadBatch
from pyspark_ledger.protocol.stripes import merged_prefix, split_batch, stripe_rest


class StripedFetch:
    """Reads the entries of one ``ReadBatch`` of a striped ledger (see the module docstring)."""

    def __init__(self, ctx: ClientContext, ledger_id: int, codec: EntryCodec, batch: ReadBatch,
                 write_quorum: int, ack_quorum: int, *, copy: bool = True, master_key: bytes,
                 stats: ReadStats | None = None) -> None:
        self._ctx = ctx
        self._stats = ReadStats() if stats is None else stats
        self._ledger_id = ledger_id
        self._codec = codec
        self._quorums = (write_quorum, ack_quorum)
        self._copy = copy
        self._key = master_key
        self.batch = batch
        self._stripes = split_batch(batch, write_quorum)
        self._budget = ctx.config.read_batch_bytes
        self._max_bytes = max(1, self._budget // len(self._stripes))
        self._bytes = 0  # payload bytes read so far
        self._read: list[list[LedgerEntry]] = [[] for _ in self._stripes]
        self._errors: dict[int, BaseException] = {}
        self._unread_from = batch.last_entry_id + 1  # the lowest entry a stripe failed to read
        self._running = len(self._stripes)
        self._fetches: dict[int, RangeFetch] = {}  # each stripe's current round
        self._timed = False
        self._lock = threading.Lock()
        #: Answers handled so far: a caller waiting for ``result`` may go on waiting while this grows.
        self.progress = 0
        self.result: "Future[list[LedgerEntry]]" = Future()

    def start(self, *, timed: bool = True) -> "StripedFetch":
        """Start every stripe's read; untimed (read ahead), no speculative read goes out before ``time_it``."""
        self._timed = self._timed or timed
        for index, stripe in enumerate(self._stripes):
            self._fetch(index, stripe)
        return self

    def time_it(self) -> None:
        """The reader now waits for this batch: time the stripes' reads (docs/protocol.md L7), this round's
        and every later one's."""
        with self._lock:
            self._timed = True
            fetches = list(self._fetches.values())
        for fetch in fetches:
            fetch.time_it()

    def _fetch(self, index: int, stripe: ReadBatch) -> None:
        write_quorum, ack_quorum = self._quorums
        fetch = RangeFetch(self._ctx, self._ledger_id, self._codec, stripe, write_quorum, ack_quorum,
                           copy=self._copy, master_key=self._key, max_bytes=self._max_bytes, stats=self._stats)
        fetch.result.add_done_callback(lambda done: self._on_stripe(index, stripe, done))
        with self._lock:
            self._fetches[index] = fetch
            timed = self._timed
        fetch.start(timed=timed)  # a time_it() in between has timed it already: start keeps that

    def _on_stripe(self, index: int, stripe: ReadBatch, done: Future) -> None:
        try:
            self._next_round(index, stripe, done)
        except Exception as exc:  # noqa: BLE001 - a callback's error would be lost; the reader must see it
            if not self.result.done():
                self.result.set_exception(exc)

    def _next_round(self, index: int, stripe: ReadBatch, done: Future) -> None:
        """Keep what the stripe's round read; start its next round, or finish once every stripe is done."""
        error = done.exception()
        rest = None
        with self._lock:
            self.progress += 1
            if error is not None:
                self._errors[index] = error
                self._unread_from = min(self._unread_from, stripe.first_entry_id)
            else:
                entries = done.result()
                self._read[index].extend(entries)
                self._bytes += sum(len(entry.data) for entry in entries)
                rest = stripe_rest(stripe, len(entries))
                if rest is not None and (rest.first_entry_id > self._unread_from or self._bytes >= self._budget):
                    rest = None  # past an entry that failed: read again by the next fetch anyway; or enough bytes
            if rest is None:
                self._running -= 1
                finished = self._running == 0
        if rest is not None:
            self._fetch(index, rest)
        elif finished:
            self._finish()

    def _finish(self) -> None:
        entries = merged_prefix(self.batch, self._read)
        if entries:
            self.result.set_result(entries)
        else:  # the batch's first entry is the first of stripe 0, which failed
            self.result.set_exception(self._errors.get(0) or next(iter(self._errors.values())))
