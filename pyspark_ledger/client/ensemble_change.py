"""Executing one ensemble change of a writer: choose replacements, CAS the new fragment, resolve conflicts.

docs/protocol.md W2-W5: replace the failed bookies, start a new
fragment at the first unconfirmed entry, write it with compare-and-set
(``metadata_update.update_ledger``); on each version of the metadata read,
``resolve_ensemble_change_conflict`` says whether to write, accept what is
stored, choose other replacements, or stop because the ledger is no longer
OPEN (W5). The writer fails its pending adds
on any error raised here: NotEnoughBookiesError (W4), LedgerFencedError
(recovery started), LedgerClosedError, or the store's errors.
"""
from __future__ import annotations

import logging

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.metadata_update import retry_policy, update_ledger
from pyspark_ledger.errors import InternalError, LedgerClosedError, LedgerFencedError, NotEnoughBookiesError
from pyspark_ledger.metadata.model import OPEN, LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.protocol.add_tracker import EnsembleChangeRequest
from pyspark_ledger.protocol.ledger_rules import Decision, resolve_ensemble_change_conflict
from pyspark_ledger.protocol.quarantine import exclusion_rounds
from pyspark_ledger.protocol.schedule import Quorums

log = logging.getLogger(__name__)


def change_ensemble(ctx: ClientContext, current: Versioned[LedgerMetadata], request: EnsembleChangeRequest,
                    exclude: set[str]) -> Versioned[LedgerMetadata]:
    """Make ``request`` effective in the metadata store; returns the stored metadata now in force."""
    quorums = Quorums.of(current.value)  # the replacements keep the write quorums' spread over zones (P1)
    change = _Change(ctx, request, _choose(ctx, request, dict(request.failed), exclude, quorums), exclude, quorums)
    updated = update_ledger(ctx.store, current.value.ledger_id, needs_update=change.needs_update,
                            transform=change.transform, policy=retry_policy(ctx.config), current=current)
    if updated.written:
        log.info("ledger %d: ensemble change from entry %d: %s -> %s", current.value.ledger_id,
                 request.first_unconfirmed_entry, change.failed, change.replacements)
    return updated.stored


class _Change:
    """What the change still needs on each version of the metadata read: per
    ``resolve_ensemble_change_conflict``, write it (choosing other replacements when one chosen is now in the
    stored ensemble), accept what is stored, or stop (the ledger is no longer OPEN: W5)."""

    def __init__(self, ctx: ClientContext, request: EnsembleChangeRequest, replacements: dict[int, str],
                 exclude: set[str], quorums: Quorums) -> None:
        self._ctx = ctx
        self._quorums = quorums
        self._exclude = exclude
        self.failed = dict(request.failed)
        self.first = request.first_unconfirmed_entry
        self.replacements = replacements
        self._target: LedgerMetadata | None = None

    def needs_update(self, stored: LedgerMetadata) -> bool:
        resolution = resolve_ensemble_change_conflict(stored, self.failed, self.replacements, self.first)
        if resolution.decision is Decision.CHOOSE_AGAIN:
            taken = self._exclude | set(self.failed.values()) | set(stored.current_fragment.bookies)
            self.replacements = self._ctx.choose_replacements(stored.current_fragment.bookies, self.failed, taken,
                                                              quorums=self._quorums)
            resolution = resolve_ensemble_change_conflict(stored, self.failed, self.replacements, self.first)
        if resolution.decision is Decision.SUCCESS:
            return False
        if resolution.decision is Decision.ERROR:
            raise _stop_error(stored, resolution.reason)
        if resolution.decision is not Decision.WRITE:
            raise LedgerClosedError(f"ledger {stored.ledger_id}: no replacement outside the stored ensemble "
                                    f"could be chosen ({resolution.reason})")
        self._target = resolution.metadata
        return True

    def transform(self, stored: LedgerMetadata) -> LedgerMetadata:
        target, self._target = self._target, None
        if target is None:
            raise InternalError("transform called without needs_update")  # pragma: no cover
        return target


def _choose(ctx: ClientContext, request: EnsembleChangeRequest, failed: dict[int, str],
            exclude: set[str], quorums: Quorums) -> dict[int, str]:
    """Replacements outside the ensemble and each exclusion set of ``exclusion_rounds`` in turn: bookies
    that failed this writer and the client's quarantine are avoided while others are left."""
    rounds = exclusion_rounds(failed.values(), exclude, ctx.quarantine.current())
    for attempt, excluded in enumerate(rounds):
        try:
            replacements = ctx.choose_replacements(request.ensemble, failed, excluded, quorums=quorums)
        except NotEnoughBookiesError:
            if attempt == len(rounds) - 1:
                raise
            continue
        if attempt:
            log.info("ensemble change: no fresh bookie left, taking back %s, which failed before",
                     sorted(set(replacements.values()) & rounds[0]))
        return replacements
    raise InternalError("exclusion_rounds returned no round")  # pragma: no cover


def _stop_error(stored: LedgerMetadata, reason: str) -> Exception:
    if stored.state != OPEN:
        return LedgerFencedError(f"ledger {stored.ledger_id} is {stored.state} (another client is recovering or "
                                 f"closed it): {reason}")
    return LedgerClosedError(f"ensemble change of ledger {stored.ledger_id} is impossible: {reason}")
