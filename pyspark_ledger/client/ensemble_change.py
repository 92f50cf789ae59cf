"""Executing one ensemble change of a writer: choose replacements, CAS the new fragment, resolve conflicts.

docs/protocol.md W2-W5: replace the failed bookies, start a new
fragment at the first unconfirmed entry, write it with compare-and-set; on a
conflict re-read the metadata and, per ``resolve_ensemble_change_conflict``,
write again, accept what is stored, choose other replacements, or stop
because the ledger is no longer OPEN (W5). The writer fails its pending adds
on any error raised here: NotEnoughBookiesError (W4), LedgerFencedError
(recovery started), LedgerClosedError, or the store's errors.
"""
from __future__ import annotations

import logging

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.metadata_ops import write
from pyspark_ledger.errors import (LedgerClosedError, LedgerFencedError, MetadataError, MetadataVersionConflictError,
                                   NotEnoughBookiesError)
from pyspark_ledger.metadata.model import OPEN, LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_tracker import EnsembleChangeRequest
from pyspark_ledger.protocol.ledger_rules import Decision, ensemble_change, resolve_ensemble_change_conflict
from pyspark_ledger.protocol.quarantine import exclusion_rounds

log = logging.getLogger(__name__)


def change_ensemble(ctx: ClientContext, current: Versioned[LedgerMetadata], request: EnsembleChangeRequest,
                    exclude: set[str]) -> Versioned[LedgerMetadata]:
    """Make ``request`` effective in the metadata store; returns the stored metadata now in force."""
    failed = dict(request.failed)
    first = request.first_unconfirmed_entry
    stored = current
    replacements = _choose(ctx, request, failed, exclude)
    target = ensemble_change(stored.value, replacements, first)
    for _ in range(ctx.config.metadata_retries):
        try:
            version = write(ctx.store, stored.value, target, stored.version)
            log.info("ledger %d: ensemble change from entry %d: %s -> %s", target.ledger_id, first,
                     failed, replacements)
            return Versioned(target, version)
        except MetadataVersionConflictError:
            stored = ctx.store.read_ledger(current.value.ledger_id)
        resolution = resolve_ensemble_change_conflict(stored.value, failed, replacements, first)
        if resolution.decision is Decision.CHOOSE_AGAIN:
            taken = exclude | set(failed.values()) | set(stored.value.current_fragment.bookies)
            replacements = ctx.choose_replacements(stored.value.current_fragment.bookies, failed, taken)
            resolution = resolve_ensemble_change_conflict(stored.value, failed, replacements, first)
        if resolution.decision is Decision.SUCCESS:
            return stored
        if resolution.decision is Decision.ERROR:
            raise _stop_error(stored.value, resolution.reason)
        if resolution.decision is not Decision.WRITE:
            raise LedgerClosedError(f"ledger {stored.value.ledger_id}: no replacement outside the stored ensemble "
                                    f"could be chosen ({resolution.reason})")
        target = resolution.metadata
    raise MetadataError(f"ensemble change of ledger {current.value.ledger_id} lost "
                        f"{ctx.config.metadata_retries} compare-and-sets in a row")


def _choose(ctx: ClientContext, request: EnsembleChangeRequest, failed: dict[int, str],
            exclude: set[str]) -> dict[int, str]:
    """Replacements outside the ensemble and each exclusion set of ``exclusion_rounds`` in turn: bookies
    that failed this writer and the client's quarantine are avoided while others are left."""
    rounds = exclusion_rounds(failed.values(), exclude, ctx.quarantine.current())
    for attempt, excluded in enumerate(rounds):
        try:
            replacements = ctx.choose_replacements(request.ensemble, failed, excluded)
        except NotEnoughBookiesError:
            if attempt == len(rounds) - 1:
                raise
            continue
        if attempt:
            log.info("ensemble change: no fresh bookie left, taking back %s, which failed before",
                     sorted(set(replacements.values()) & rounds[0]))
        return replacements
    raise AssertionError("exclusion_rounds returned no round")  # pragma: no cover


def _stop_error(stored: LedgerMetadata, reason: str) -> Exception:
    if stored.state != OPEN:
        return LedgerFencedError(f"ledger {stored.ledger_id} is {stored.state} (another client is recovering or "
                                 f"closed it): {reason}")
    return LedgerClosedError(f"ensemble change of ledger {stored.ledger_id} is impossible: {reason}")
