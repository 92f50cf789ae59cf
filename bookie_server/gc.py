"""The bookie's garbage collector thread: deletes the ledgers the metadata store no longer has, and their data.

Every ``interval_s`` a pass
  0. reads the store's instance id, and deletes nothing at all (outcome
     ``store_mismatch``, logged and counted) when it is not the one the
     bookie registered with (``store_instance_id``, kept beside its cookie)
     or cannot be read: a lost store re-created empty, or another cluster's
     store, would make every ledger here look deleted. The id is read again
     after the listing, so a store replaced during the listing is caught;
  1. reads the ledgers this bookie holds, then lists the metadata store (in
     that order: a ledger created after the listing began cannot be
     mistaken for garbage);
  2. deletes locally every ledger absent from the listing in this pass and
     the previous one (``gc_rules.LedgerSuspects``: a stale listing or an
     unknown ledger fenced here (docs/protocol.md F4) gets one more
     interval); if the listing fails, nothing is deleted;
  3. with ``overreplicated_wait_s``, and at most 8 times per wait
     (``gc_rules.overreplication_scan_due``), reads the metadata of the other
     local ledgers and deletes those CLOSED without naming this bookie for
     that long, and not written here within it (``gc_rules.unnamed_closed``:
     the left-overs of a re-replication that moved this bookie's copies away);
  4. asks the storage to seal the current entry log early if that would let
     it be collected (``gc_rules.rotation_due``), to reclaim entry logs left
     with no live ledger, then
     (``compaction_threshold`` > 0) to compact the sparse ones. The storage
     orders every step so that a kill -9 anywhere is safe (``storage_gc``).

The bookie server owns the thread: started after registration, stopped and
joined before storage closes. A failed pass is logged and counted; the next
pass tries again. ``run_pass()`` runs one pass on the caller's thread.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

from bookie_server.gc_rules import LedgerSuspects, overreplication_scan_due, unnamed_closed
from bookie_server.periodic import PeriodicThread
from bookie_server.storage import BookieStorage
from pyspark_ledger.errors import InvalidConfigurationError, LedgerError, NoSuchLedgerError, StorageError
from pyspark_ledger.metadata.instance import read_instance_id
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.protocol.rereplication import Lasting

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_S = 300.0
DEFAULT_COMPACTION_THRESHOLD = 0.2
DEFAULT_OVERREPLICATED_WAIT_S = 86_400.0  # a day, as BookKeeper's gcOverreplicatedLedgerWaitTime


@dataclass
class GcPass:
    """What one pass did; ``outcome`` is ``ok``, ``store_mismatch``, ``listing_failed`` or ``storage_failed``."""

    outcome: str = "ok"
    ledgers_deleted: list[int] = field(default_factory=list)
    overreplicated_deleted: list[int] = field(default_factory=list)  # also in ledgers_deleted
    logs_deleted: list[int] = field(default_factory=list)
    logs_compacted: list[int] = field(default_factory=list)
    entries_copied: int = 0
    bytes_reclaimed: int = 0

    @property
    def collected_something(self) -> bool:
        return bool(self.ledgers_deleted or self.logs_deleted or self.logs_compacted)


class GarbageCollector:
    """Runs GC passes every ``interval_s`` on its own thread (see the module docstring)."""

    def __init__(self, storage: BookieStorage, store: MetadataStore, interval_s: float = DEFAULT_INTERVAL_S,
                 compaction_threshold: float = DEFAULT_COMPACTION_THRESHOLD, metrics=None, *,
                 bookie_id: str | None = None, overreplicated_wait_s: float | None = None,
                 store_instance_id: str | None = None) -> None:
        """``overreplicated_wait_s`` (needs ``bookie_id``; None: off) turns on the collection of left-over
        copies of CLOSED ledgers that no longer name this bookie. ``store_instance_id``: the instance id of
        the store the bookie registered with; a pass deletes nothing while the store has another one (or it
        cannot be read). The bookie server always gives it; None (tests of the rules) skips the check."""
        _check_settings(interval_s, compaction_threshold)
        if overreplicated_wait_s is not None:
            if isinstance(overreplicated_wait_s, bool) or not isinstance(overreplicated_wait_s, (int, float)) \
                    or not 0 < overreplicated_wait_s < math.inf or not bookie_id:
                raise InvalidConfigurationError(
                    f"the over-replicated ledger wait must be a finite number of seconds > 0 with a bookie id, got "
                    f"{overreplicated_wait_s!r} (--gc-overreplicated-wait; 0 turns it off)")
        self._storage = storage
        self._store = store
        self._store_instance_id = store_instance_id
        self._bookie_id = bookie_id
        self._wait_s = overreplicated_wait_s
        self._unnamed = None if overreplicated_wait_s is None else Lasting(float(overreplicated_wait_s))
        self._last_scan: float | None = None  # monotonic time of the last complete over-replication scan
        self._threshold = compaction_threshold
        self._metrics = metrics
        self._suspects = LedgerSuspects()
        self._pass_lock = threading.Lock()
        self._thread = PeriodicThread("bookie-gc", interval_s, self.run_pass, "garbage collection pass")

    @property
    def suspects(self) -> frozenset[int]:
        """Ledgers found missing from the store in the last pass: deleted next pass if still missing."""
        return self._suspects.suspects

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (a pass in progress finishes first). Idempotent."""
        self._thread.stop()

    def run_pass(self) -> GcPass:
        """One pass now; raises nothing (failures are logged and reported in the result)."""
        with self._pass_lock:
            result = self._pass()
        if self._metrics is not None:
            self._metrics.gc_pass_done(result)
        return result

    def _pass(self) -> GcPass:
        result = GcPass()
        if not self._same_store():
            result.outcome = "store_mismatch"
            return result
        local = self._storage.ledger_ids()
        try:
            listed = set(self._store.list_ledgers())
        except LedgerError as exc:
            log.warning("garbage collection: cannot list the ledgers in %s (%s); nothing deleted this pass",
                        self._store.uri, exc)
            result.outcome = "listing_failed"
            return result
        if not self._same_store():
            result.outcome = "store_mismatch"
            return result
        try:
            result.ledgers_deleted = self._storage.delete_ledgers(sorted(self._suspects.confirm(local, listed)))
            if self._unnamed is not None and overreplication_scan_due(self._last_scan, time.monotonic(),
                                                                      self._wait_s):
                result.overreplicated_deleted = self._collect_overreplicated(local & listed)
                result.ledgers_deleted += result.overreplicated_deleted
            self._storage.rotate_entry_log(self._threshold)
            self._absorb(result, self._storage.reclaim_entry_logs())
            if self._threshold > 0 and not self._thread.stopping:  # a stopping bookie does not start copying
                self._absorb(result, self._storage.compact_entry_logs(self._threshold))
        except StorageError as exc:
            log.error("garbage collection pass stopped: %s", exc)
            result.outcome = "storage_failed"
        if result.collected_something:
            log.info("garbage collection: deleted %d ledgers %s, %d entry logs %s, compacted %d (%d entries "
                     "copied), %d bytes reclaimed", len(result.ledgers_deleted), _ids(result.ledgers_deleted),
                     len(result.logs_deleted), _ids(result.logs_deleted), len(result.logs_compacted),
                     result.entries_copied, result.bytes_reclaimed)
        return result

    def _same_store(self) -> bool:
        """Whether the store is still the one the bookie registered with (logged when not)."""
        expected = self._store_instance_id
        if expected is None:
            return True
        try:
            found = read_instance_id(self._store)
        except LedgerError as exc:
            log.error("garbage collection refused: cannot read the instance id of metadata store %s (%s); "
                      "nothing deleted", self._store.uri, exc)
            return False
        if found != expected:
            log.error("garbage collection refused: metadata store %s is instance %s, not %s that this bookie's "
                      "data belongs to (a lost store re-created, or another cluster's); nothing deleted. "
                      "Restore the original store", self._store.uri, found or "(none)", expected or "(none recorded)")
            return False
        return True

    def _collect_overreplicated(self, ledger_ids: set[int]) -> list[int]:
        """Delete the left-overs of CLOSED ledgers unnamed here for the wait (and not written here within it)."""
        unnamed = set()
        for ledger_id in sorted(ledger_ids):
            if self._thread.stopping:
                return []
            try:
                metadata = self._store.read_ledger(ledger_id).value
            except NoSuchLedgerError:
                continue  # deleted meanwhile: the two-pass rule takes it
            except LedgerError as exc:
                log.warning("garbage collection: cannot read the metadata of ledger %d (%s); no over-replicated "
                            "ledger deleted this pass", ledger_id, exc)
                return []
            if unnamed_closed(metadata, self._bookie_id):
                unnamed.add(ledger_id)
        now = time.monotonic()  # the clock of the storage's LedgerRecord.written_at
        self._last_scan = now
        due = self._unnamed.observe(unnamed, now)
        if not due:
            return []
        deleted = self._storage.delete_ledgers(sorted(due), written_before=now - self._wait_s)
        if deleted:
            log.info("garbage collection: deleted the left-over copies of %d ledgers %s: closed, and named "
                     "elsewhere for %.0f s (re-replicated away from this bookie)", len(deleted), _ids(deleted),
                     self._wait_s)
        return deleted

    @staticmethod
    def _absorb(result: GcPass, outcome) -> None:
        result.logs_deleted.extend(outcome.logs_deleted)
        result.logs_compacted.extend(outcome.logs_compacted)
        result.entries_copied += outcome.entries_copied
        result.bytes_reclaimed += outcome.bytes_reclaimed


def _check_settings(interval_s: float, compaction_threshold: float) -> None:
    if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not 0 < interval_s < math.inf:
        raise InvalidConfigurationError(f"GC interval must be a finite number of seconds > 0, got {interval_s!r} "
                                        "(--gc-interval; 0 turns the collector off)")
    if isinstance(compaction_threshold, bool) or not isinstance(compaction_threshold, (int, float)) \
            or not 0 <= compaction_threshold < 1:
        raise InvalidConfigurationError(f"GC compaction threshold must be a fraction in [0, 1), got "
                                        f"{compaction_threshold!r} (--gc-compaction-threshold; 0 = no compaction)")


def _ids(ids: list[int], shown: int = 10) -> str:
    text = ", ".join(map(str, ids[:shown]))
    return f"[{text}{', ...' if len(ids) > shown else ''}]"
