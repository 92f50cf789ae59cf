"""Metadata compare-and-set loops of the client: create, close, mark in recovery, recovery close.

Each loop writes what ``pyspark_ledger.protocol.ledger_rules`` says, and on a
lost CAS re-reads the stored metadata and asks the matching ``resolve_*``
rule what to do. Nothing is ever overwritten blindly. Store errors surface
as the store raised them (MetadataError, NoSuchLedgerError).
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from pyspark_ledger.entry import master_key, password_check
from pyspark_ledger.errors import (LedgerClosedError, LedgerFencedError, MetadataError, MetadataExistsError,
                                   MetadataVersionConflictError)
from pyspark_ledger.metadata.model import IN_RECOVERY, OPEN, LedgerMetadata, master_key_check
from pyspark_ledger.metadata.store import MetadataStore, Versioned
from pyspark_ledger.protocol.ledger_rules import (Decision, Resolution, check_transition, close_metadata,
                                                  mark_in_recovery, new_ledger_metadata, resolve_close_conflict,
                                                  resolve_recovery_close_conflict)


def create_ledger(store: MetadataStore, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int,
                  digest: str, password: bytes, custom: Mapping[str, bytes] | None,
                  retries: int, seal: Callable[[bytes, int], str] | None = None) -> Versioned[LedgerMetadata]:
    """Store OPEN metadata for a new ledger id (a taken id is skipped).

    The metadata carries a check of the master key: bookies verify a first add or fence against it;
    and ``seal(password, ledger_id)`` (the password sealed to the cluster's repair key) when given."""
    key_check = master_key_check(master_key(password))
    for _ in range(retries):
        ledger_id = store.new_ledger_id()
        metadata = new_ledger_metadata(ledger_id, ensemble, len(ensemble), write_quorum, ack_quorum, digest,
                                       password_check(password), custom, int(time.time() * 1000))
        metadata = metadata.with_changes(master_key_check=key_check,
                                         repair_secret="" if seal is None else seal(password, ledger_id))
        try:
            return Versioned(metadata, store.create_ledger(metadata))
        except MetadataExistsError:
            continue
    raise MetadataError(f"could not find a free ledger id in {retries} attempts")


def write(store: MetadataStore, before: LedgerMetadata, after: LedgerMetadata, version: int) -> int:
    """CAS ``after`` over ``version``, after checking it is a valid successor of ``before``."""
    check_transition(before, after)
    return store.write_ledger(after, version)


def close_ledger(store: MetadataStore, current: Versioned[LedgerMetadata], last_entry_id: int, length: int,
                 retries: int) -> Versioned[LedgerMetadata]:
    """The writer's close (docs/protocol.md C1, C3): CLOSED at ``last_entry_id``; resolves every lost CAS."""
    stored = current
    target = close_metadata(stored.value, last_entry_id, length) if stored.value.state == OPEN else None
    for _ in range(retries):
        if target is None:
            resolution = resolve_close_conflict(stored.value, last_entry_id, length)
            if resolution.decision is Decision.SUCCESS:
                return stored
            if resolution.decision is Decision.ERROR:
                raise close_error(stored.value, resolution)
            target = resolution.metadata
        try:
            return Versioned(target, write(store, stored.value, target, stored.version))
        except MetadataVersionConflictError:
            stored, target = store.read_ledger(stored.value.ledger_id), None
    raise MetadataError(f"closing ledger {current.value.ledger_id} lost {retries} compare-and-sets in a row")


def close_error(stored: LedgerMetadata, resolution: Resolution) -> Exception:
    """The writer was superseded (recovery) or the close is impossible."""
    if stored.state == IN_RECOVERY or stored.is_closed:
        return LedgerFencedError(f"cannot close ledger {stored.ledger_id}: {resolution.reason}")
    return LedgerClosedError(f"cannot close ledger {stored.ledger_id}: {resolution.reason}")


def start_recovery(store: MetadataStore, ledger_id: int, retries: int) -> Versioned[LedgerMetadata]:
    """Recovery's first step (F1): OPEN -> IN_RECOVERY by CAS; returns the stored metadata to recover from
    (already IN_RECOVERY: as is; CLOSED: nothing to recover)."""
    stored = store.read_ledger(ledger_id)
    for _ in range(retries):
        resolution = mark_in_recovery(stored.value)
        if resolution.decision is not Decision.WRITE:
            return stored
        try:
            version = write(store, stored.value, resolution.metadata, stored.version)
            return Versioned(resolution.metadata, version)
        except MetadataVersionConflictError:
            stored = store.read_ledger(ledger_id)
    raise MetadataError(f"marking ledger {ledger_id} IN_RECOVERY lost {retries} compare-and-sets in a row")


def recovery_close(store: MetadataStore, recovered_from: Versioned[LedgerMetadata],
                   closed: LedgerMetadata) -> Versioned[LedgerMetadata] | None:
    """CAS recovery's CLOSED metadata; on a lost CAS adopt a CLOSED ledger (R3), or None: run again."""
    try:
        return Versioned(closed, write(store, recovered_from.value, closed, recovered_from.version))
    except MetadataVersionConflictError:
        stored = store.read_ledger(closed.ledger_id)
    resolution = resolve_recovery_close_conflict(stored.value)
    return stored if resolution.decision is Decision.SUCCESS else None
