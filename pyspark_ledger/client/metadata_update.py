"""Every change of a ledger's metadata: ``metadata.update_loop`` with the ledger transition check.

``update_ledger`` is the only function of the client that writes an existing
ledger's metadata (close, marking recovery, recovery's close, ensemble
change, re-replication). It always runs ``protocol.ledger_rules.check_transition``
on the value it is about to compare-and-set, so no caller can write a change
the protocol forbids, and on a lost compare-and-set it re-reads the stored
metadata and lets the caller decide again.
"""
from __future__ import annotations

from typing import Callable

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import MetadataStore, Versioned
from pyspark_ledger.metadata.update_loop import RetryPolicy, Updated, update_loop
from pyspark_ledger.protocol.ledger_rules import check_transition


def retry_policy(config: ClientConfig) -> RetryPolicy:
    """The client's policy for metadata compare-and-sets: ``metadata_retries`` attempts, default back-off."""
    return RetryPolicy(attempts=config.metadata_retries)


def update_ledger(store: MetadataStore, ledger_id: int, *, needs_update: Callable[[LedgerMetadata], bool],
                  transform: Callable[[LedgerMetadata], LedgerMetadata | None], policy: RetryPolicy,
                  current: Versioned[LedgerMetadata] | None = None) -> Updated[LedgerMetadata]:
    """Change ledger ``ledger_id``'s metadata by compare-and-set until it sticks or is no longer needed.

    ``current`` is the metadata as the caller knows it (read from the store if None). Errors: see
    ``metadata.update_loop``; InternalError if a transform breaks the transition rules,
    NoSuchLedgerError if the ledger was deleted."""
    return update_loop(f"ledger {ledger_id}", lambda: store.read_ledger(ledger_id), store.write_ledger,
                       needs_update=needs_update, transform=transform, check=check_transition, policy=policy,
                       current=current)
