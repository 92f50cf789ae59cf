"""The client's ledger metadata operations: create, close, mark in recovery, recovery close, delete.

Every change goes through ``metadata_update.update_ledger`` (one compare-and-set
loop, the transition check included); each operation only says, for every
version of the metadata it reads, whether a change is still needed -- per
``pyspark_ledger.protocol.ledger_rules`` -- and what it is. Nothing is ever
overwritten blindly. Store errors surface as the store raised them
(MetadataError, NoSuchLedgerError).
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from pyspark_ledger.client.metadata_update import update_ledger
from pyspark_ledger.entry import master_key, password_check
from pyspark_ledger.errors import LedgerClosedError, LedgerFencedError, MetadataError, MetadataExistsError
from pyspark_ledger.metadata.model import IN_RECOVERY, LedgerMetadata, master_key_check
from pyspark_ledger.metadata.store import MetadataStore, Versioned
from pyspark_ledger.metadata.update_loop import RetryPolicy, update_loop
from pyspark_ledger.protocol.ledger_rules import (Decision, Resolution, close_metadata, mark_in_recovery,
                                                  new_ledger_metadata, resolve_close_conflict,
                                                  resolve_recovery_close_conflict)


def create_ledger(store: MetadataStore, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int,
                  digest: str, password: bytes, custom: Mapping[str, bytes] | None,
                  policy: RetryPolicy, seal: Callable[[bytes, int], str] | None = None) -> Versioned[LedgerMetadata]:
    """Store OPEN metadata for a new ledger id (a taken id is skipped, up to ``policy.attempts`` times).

    The metadata carries a check of the master key: bookies verify a first add or fence against it;
    and ``seal(password, ledger_id)`` (the password sealed to the cluster's repair key) when given."""
    key_check = master_key_check(master_key(password))
    for _ in range(policy.attempts):
        ledger_id = store.new_ledger_id()
        metadata = new_ledger_metadata(ledger_id, ensemble, len(ensemble), write_quorum, ack_quorum, digest,
                                       password_check(password), custom, int(time.time() * 1000))
        metadata = metadata.with_changes(master_key_check=key_check,
                                         repair_secret="" if seal is None else seal(password, ledger_id))
        try:
            return Versioned(metadata, store.create_ledger(metadata))
        except MetadataExistsError:
            continue
    raise MetadataError(f"could not find a free ledger id in {policy.attempts} attempts")


def close_ledger(store: MetadataStore, current: Versioned[LedgerMetadata], last_entry_id: int, length: int,
                 policy: RetryPolicy) -> Versioned[LedgerMetadata]:
    """The writer's close (docs/protocol.md C1, C3): CLOSED at ``last_entry_id``. Whenever the metadata is read (again),
    ``resolve_close_conflict`` decides: still OPEN, close it; CLOSED at this end, done; IN_RECOVERY or
    CLOSED elsewhere, LedgerFencedError (an impossible end: LedgerClosedError)."""
    def needs_update(stored: LedgerMetadata) -> bool:
        resolution = resolve_close_conflict(stored, last_entry_id, length)
        if resolution.decision is Decision.ERROR:
            raise close_error(stored, resolution)
        return resolution.decision is Decision.WRITE

    return update_ledger(store, current.value.ledger_id, needs_update=needs_update,
                         transform=lambda stored: close_metadata(stored, last_entry_id, length),
                         policy=policy, current=current).stored


def close_error(stored: LedgerMetadata, resolution: Resolution) -> Exception:
    """The writer was superseded (recovery) or the close is impossible."""
    if stored.state == IN_RECOVERY or stored.is_closed:
        return LedgerFencedError(f"cannot close ledger {stored.ledger_id}: {resolution.reason}")
    return LedgerClosedError(f"cannot close ledger {stored.ledger_id}: {resolution.reason}")


def start_recovery(store: MetadataStore, ledger_id: int, policy: RetryPolicy) -> Versioned[LedgerMetadata]:
    """Recovery's first step (F1): OPEN -> IN_RECOVERY by CAS; returns the stored metadata to recover from
    (already IN_RECOVERY: as is; CLOSED: nothing to recover)."""
    return update_ledger(store, ledger_id,
                         needs_update=lambda stored: mark_in_recovery(stored).decision is Decision.WRITE,
                         transform=lambda stored: mark_in_recovery(stored).metadata, policy=policy).stored


class _RecoverAgain(Exception):
    """The metadata moved on during recovery without being closed: recovery runs again from it."""


def recovery_close(store: MetadataStore, recovered_from: Versioned[LedgerMetadata], closed: LedgerMetadata,
                   policy: RetryPolicy) -> Versioned[LedgerMetadata] | None:
    """CAS recovery's CLOSED metadata over the metadata it recovered from; when that changed, adopt a
    CLOSED ledger (R3), or None: run recovery again from the stored metadata."""
    def needs_update(stored: LedgerMetadata) -> bool:
        if stored == recovered_from.value:
            return True  # (only the version moved: the recovered end still applies)
        if resolve_recovery_close_conflict(stored).decision is Decision.SUCCESS:
            return False
        raise _RecoverAgain()

    try:
        return update_ledger(store, closed.ledger_id, needs_update=needs_update, transform=lambda _: closed,
                             policy=policy, current=recovered_from).stored
    except _RecoverAgain:
        return None


def delete_ledger_metadata(store: MetadataStore, ledger_id: int, authorize: Callable[[LedgerMetadata], None],
                  policy: RetryPolicy) -> None:
    """Remove the ledger's metadata, ``authorize(metadata)`` (raising UnauthorizedError) checking each version
    read: the last change of a ledger takes the same loop, its write a delete of the version read (a ledger
    closed, say, since it was checked is checked again). NoSuchLedgerError if there is none."""
    def delete(metadata: LedgerMetadata, version: int) -> int:
        store.delete_ledger(ledger_id, expected_version=version)
        return version

    def needs_update(stored: LedgerMetadata) -> bool:
        authorize(stored)
        return True

    update_loop(f"ledger {ledger_id}", lambda: store.read_ledger(ledger_id), delete, needs_update=needs_update,
                transform=lambda stored: stored, policy=policy)
