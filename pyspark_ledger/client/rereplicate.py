"""Executing re-replication of one ledger (``protocol.rereplication`` decides what; this module does it).

For every sealed fragment slot held by a lost bookie: choose a replacement
outside the fragment's ensemble (placement seam), read each entry the lost
bookie held from a surviving replica of its write set (range reads, falling
back replica by replica), verify its digest (a corrupt copy is never spread),
write it unchanged to the replacement with the recovery flag, and wait for
every write to be acknowledged. Only then one metadata CAS names the
replacements (``metadata_update.update_ledger``, with the transition check:
a sealed fragment only takes a bookie from outside its ensemble); on a
version conflict the metadata is re-read and the same plan applied again if
it still fits, else ``MetadataVersionConflictError`` (run it again). A
failure before the CAS changes no metadata: the copies already written are
harmless (a later run writes them again).

An entry that no surviving replica can return is lost: ``DataLossError``
names it and nothing is changed.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.metadata_update import retry_policy, update_ledger
from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.entry import EntryCodec, master_key, verify_password
from pyspark_ledger.errors import (BookieError, BookieUnavailableError, CorruptEntryError, DataLossError, LedgerError,
                                   MetadataVersionConflictError, NotEnoughBookiesError, error_for_status)
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.rereplication import (FragmentRepair, apply_repairs, entries_of, lost_bookies,
                                                   plan_repairs, sources_of)
from pyspark_ledger.protocol.schedule import Quorums

log = logging.getLogger(__name__)
#: ``on_progress(ledger_id, entries_copied, entries_to_copy)``: called as copies are acknowledged.
ProgressCallback = Callable[[int, int, int], None]
#: Writes to the replacement in flight at once, and bytes asked for per range read.
WRITE_WINDOW = 64
READ_BYTES = 8 * 1024 * 1024
#: First pause before asking unreachable replicas again (doubling, up to 2 s, within read_timeout_s).
RETRY_PAUSE_S = 0.2
#: Answers that say a replica does not have the entry (as opposed to cannot answer now).
_ABSENT = (BookieStatus.NO_SUCH_ENTRY, BookieStatus.NO_SUCH_LEDGER)


@dataclass
class RereplicationReport:
    """What one run did: the replaced slots and how many entries were copied."""

    ledger_id: int
    lost_bookies: list[str]
    replaced: list[dict] = field(default_factory=list)   # {first_entry_id, last_entry_id, lost, replacement, entries}
    skipped_open_fragments: list[int] = field(default_factory=list)
    entries_copied: int = 0
    bytes_copied: int = 0

    def as_dict(self) -> dict:
        return {"ledger_id": self.ledger_id, "lost_bookies": self.lost_bookies, "replaced": self.replaced,
                "skipped_open_fragments": self.skipped_open_fragments, "entries_copied": self.entries_copied,
                "bytes_copied": self.bytes_copied}


def rereplicate_ledger(ctx: ClientContext, ledger_id: int, password: bytes,
                       lost: list[str] | None = None,
                       on_progress: ProgressCallback | None = None) -> RereplicationReport:
    """Re-replicate what ``lost`` bookies (default: every named bookie not registered now) held.

    ``on_progress`` (if given) hears ``(ledger_id, copied, total)`` first with ``copied == 0`` and then as
    copies are acknowledged; it is not called when there is nothing to copy."""
    stored = ctx.store.read_ledger(ledger_id)
    metadata = stored.value
    verify_password(password, metadata.password_check)
    missing = sorted(lost_bookies(metadata, ctx.transport.bookies(include_read_only=True))
                     if lost is None else set(lost))
    plan = plan_repairs(metadata, missing)
    report = RereplicationReport(ledger_id, missing, skipped_open_fragments=list(plan.skipped_open_fragments))
    if not plan.repairs:
        return report
    replacements = _choose_replacements(ctx, plan.repairs, missing, Quorums.of(metadata))
    copier = _Copier(ctx, metadata, password, missing, on_progress)
    copier.expect(plan.repairs)
    for repair in plan.repairs:
        copied = copier.copy(repair, replacements[repair])
        report.replaced.append({"first_entry_id": repair.first_entry_id, "last_entry_id": repair.last_entry_id,
                                "lost": repair.lost_bookie, "replacement": replacements[repair],
                                "entries": copied})
    report.entries_copied, report.bytes_copied = copier.entries, copier.bytes
    _store_replacements(ctx, stored, replacements)
    log.info("ledger %d re-replicated: %d slots, %d entries copied", ledger_id, len(plan.repairs), copier.entries)
    return report


def _choose_replacements(ctx: ClientContext, repairs, lost: list[str], quorums: Quorums) -> dict[FragmentRepair, str]:
    """One writable bookie per repaired slot, outside its fragment's ensemble and the lost bookies, keeping the
    fragment's write quorums spread over zones (docs/protocol.md P1)."""
    chosen: dict[FragmentRepair, str] = {}
    by_fragment: dict[int, list[FragmentRepair]] = {}
    for repair in repairs:
        by_fragment.setdefault(repair.first_entry_id, []).append(repair)
    for group in by_fragment.values():
        ensemble = group[0].ensemble
        try:
            picked = ctx.choose_replacements(ensemble, [r.bookie_index for r in group], exclude=lost,
                                             quorums=quorums)
        except NotEnoughBookiesError as exc:
            raise NotEnoughBookiesError(
                f"no writable bookie outside the ensemble {list(ensemble)} to take the place of "
                f"{[r.lost_bookie for r in group]}: start another bookie and run this again ({exc})") from exc
        for repair in group:
            chosen[repair] = picked[repair.bookie_index]
    return chosen


class _PlanGone(Exception):
    """The stored metadata no longer fits the repair plan."""


def _store_replacements(ctx: ClientContext, planned: Versioned[LedgerMetadata],
                        replacements: dict[FragmentRepair, str]) -> None:
    """Name the replacements in the metadata (with the transition check every ledger change runs), on the
    version the plan was made from or, after a lost compare-and-set, on the stored one if the plan still fits."""
    ledger_id = planned.value.ledger_id

    def needs_update(stored: LedgerMetadata) -> bool:
        updated = apply_repairs(stored, replacements)
        if updated is None:
            raise _PlanGone()
        return updated != stored  # equal: every replacement is already named there

    try:
        update_ledger(ctx.store, ledger_id, needs_update=needs_update,
                      transform=lambda stored: apply_repairs(stored, replacements), policy=retry_policy(ctx.config),
                      current=planned)
    except _PlanGone:
        raise MetadataVersionConflictError(
            f"ledger {ledger_id} changed while its entries were being copied (a fragment was replaced or "
            "resealed); nothing was recorded: run the re-replication again") from None
    except MetadataVersionConflictError as exc:
        raise MetadataVersionConflictError(f"ledger {ledger_id}: its metadata kept changing; run the "
                                           f"re-replication again ({exc})") from exc


class _Copier:
    """Reads the lost copies from survivors and writes them to replacements, pipelined."""

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, password: bytes, lost: list[str],
                 on_progress: ProgressCallback | None = None) -> None:
        self._ctx = ctx
        self._md = metadata
        self._lost = lost
        self._key = master_key(password)
        self._codec = EntryCodec(metadata.digest_type, password)
        self._timeout = ctx.config.read_timeout_s
        self.entries = 0
        self.bytes = 0
        self._settled = 0
        self._on_progress = on_progress
        self._total = 0

    def expect(self, repairs) -> None:
        """Tell the progress callback how many entries ``repairs`` will copy (before any is)."""
        size, quorum = self._md.ensemble_size, self._md.write_quorum
        self._total = sum(1 for repair in repairs for _ in entries_of(repair, size, quorum))
        if self._on_progress is not None:
            self._on_progress(self._md.ledger_id, 0, self._total)

    def copy(self, repair: FragmentRepair, replacement: str) -> int:
        wanted = deque(entries_of(repair, self._md.ensemble_size, self._md.write_quorum))
        writes: deque[tuple[int, Future]] = deque()
        copied = 0
        while wanted:
            for entry_id, body in self._fetch(repair, wanted):
                writes.append((entry_id, self._ctx.transport.add(replacement, self._md.ledger_id, entry_id,
                                                                 self._key, body, recovery=True)))
                copied += 1
                self.bytes += len(body)
                while len(writes) > WRITE_WINDOW:
                    self._settle(writes.popleft(), replacement)
        while writes:
            self._settle(writes.popleft(), replacement)
        self.entries += copied
        return copied

    def _fetch(self, repair: FragmentRepair, wanted: deque[int]) -> list[tuple[int, bytes]]:
        """Verified bodies of a run of ``wanted`` entries from its first entry on (at least that one).

        A replica that cannot be reached (e.g. a bookie just restarted) is asked again, with a growing
        pause, for up to ``read_timeout_s``; only answers that the entry is absent or corrupt on every
        surviving replica make it lost (DataLossError)."""
        entry_id = wanted[0]
        deadline = time.monotonic() + self._timeout
        pause = RETRY_PAUSE_S
        while True:
            failures: list[str] = []
            unreachable = False
            for source in sources_of(repair, entry_id, self._md.write_quorum, self._lost):
                try:
                    result = self._ctx.transport.read(source, self._md.ledger_id, entry_id, wanted[-1],
                                                      master_key=self._key, max_bytes=READ_BYTES, timeout=self._timeout
                                                      ).result(self._timeout + 5.0)
                except (BookieError, TimeoutError) as exc:
                    failures.append(f"{source}: {exc}")
                    unreachable = True
                    continue
                if not result.ok:
                    failures.append(f"{source}: {result.status.name} {result.message}")
                    unreachable |= result.status not in _ABSENT
                    continue
                noted = len(failures)
                got = self._verified(result.entries, wanted, source, failures)
                if got:
                    return got
                if len(failures) == noted:
                    failures.append(f"{source}: entry {entry_id} not in its answer")
            where = "; ".join(failures) or "no surviving replica in its write set"
            if not unreachable:
                raise DataLossError(f"entry {entry_id} of ledger {self._md.ledger_id} is on no surviving replica "
                                    f"({where}); nothing was changed")
            if time.monotonic() + pause > deadline:
                raise BookieUnavailableError(
                    f"entry {entry_id} of ledger {self._md.ledger_id}: no surviving replica could be read ({where});"
                    " nothing was changed: run the re-replication again once they are up")
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _verified(self, entries, wanted: deque[int], source: str, failures: list[str]) -> list[tuple[int, bytes]]:
        """The answered entries that are next in ``wanted`` with a valid digest (taken off ``wanted``)."""
        got = []
        for entry_id, body in entries:
            if entry_id < wanted[0]:
                continue  # an entry the lost slot did not hold (striping)
            if entry_id > wanted[0]:
                break  # the answer skipped the next wanted entry
            try:
                self._codec.decode(body, self._md.ledger_id, entry_id)
            except CorruptEntryError as exc:
                failures.append(f"{source}: entry {entry_id}: {exc}")
                break
            got.append((entry_id, body))
            wanted.popleft()
            if not wanted:
                break
        return got

    def _settle(self, write: tuple[int, Future], replacement: str) -> None:
        entry_id, future = write
        try:
            answer = future.result(self._ctx.config.add_timeout_s + 5.0)
        except (LedgerError, TimeoutError) as exc:
            raise BookieUnavailableError(f"copying entry {entry_id} of ledger {self._md.ledger_id} to {replacement} "
                                         f"failed: {exc}; nothing was recorded: run the re-replication again",
                                         bookie_id=replacement, status=BookieStatus.UNAVAILABLE) from exc
        if answer.status != BookieStatus.OK:
            raise error_for_status(answer.status, f"bookie {replacement} refused entry {entry_id} of ledger "
                                   f"{self._md.ledger_id}: {answer.status.name} {answer.message}; nothing was recorded",
                                   bookie_id=replacement)
        self._settled += 1
        if self._on_progress is not None:
            self._on_progress(self._md.ledger_id, self._settled, self._total)
