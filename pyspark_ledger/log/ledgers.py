"""The ledger operations the log layer needs, over the replication client's public API.

Creating a stream's ledger (its replication settings, tagged with the stream
and partition in the ledger's custom metadata), fencing ledgers (a recovery
open: a live writer's next add fails as fenced, and the ledger is closed at
its last recoverable entry), the readable end of a ledger (its last entry once
CLOSED, else the last add confirmed, read without fencing), and deleting
ledgers (one already gone counts as deleted; one the password does not open
is kept and logged: the cluster's repair key or its own password deletes it).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from pyspark_ledger.errors import LedgerError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.metadata.model import LedgerMetadata

if TYPE_CHECKING:  # annotations only: reading metadata must not import the gRPC client
    from pyspark_ledger.client.ledger_client import LedgerClient
    from pyspark_ledger.client.writer import LedgerWriter

log = logging.getLogger(__name__)
STREAM_TAG = "stream"
PARTITION_TAG = "partition"


@dataclass(frozen=True, slots=True)
class LedgerEnd:
    """What may be read of a ledger now: entries 0..last_entry_id, ``length`` bytes if known."""

    ledger_id: int
    last_entry_id: int
    length: int
    closed: bool
    metadata: LedgerMetadata


def create_stream_ledger(client: LedgerClient, replication: Replication, password: bytes, stream: str,
                         partition: int) -> LedgerWriter:
    """A new OPEN ledger for a partition of ``stream``; not yet part of any log."""
    tags = {STREAM_TAG: stream.encode(), PARTITION_TAG: str(partition).encode()}
    return client.create_ledger(replication.ensemble_size, replication.write_quorum, replication.ack_quorum,
                                password=password, digest=replication.digest, custom_metadata=tags)


def fence_ledgers(client: LedgerClient, ledger_ids: Iterable[int], password: bytes) -> dict[int, LedgerMetadata]:
    """Recovery-open each ledger (fence + close); their CLOSED metadata. Deleted ledgers are skipped."""
    closed = {}
    for ledger_id in ledger_ids:
        try:
            client.open_ledger(ledger_id, password, recovery=True)
            closed[ledger_id] = client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            log.info("ledger %d was deleted before it could be fenced", ledger_id)
    return closed


def readable_end(client: LedgerClient, ledger_id: int, password: bytes) -> LedgerEnd:
    """The readable end of a ledger, without fencing it.

    An OPEN ledger's byte length is not known to readers; it is reported as
    -1 and estimated by the caller.
    """
    metadata = client.ledger_metadata(ledger_id)
    if metadata.is_closed:
        return LedgerEnd(ledger_id, metadata.last_entry_id, metadata.length, True, metadata)
    reader = client.open_ledger(ledger_id, password, recovery=False)
    metadata = reader.metadata
    if metadata.is_closed:
        return LedgerEnd(ledger_id, metadata.last_entry_id, metadata.length, True, metadata)
    return LedgerEnd(ledger_id, reader.last_add_confirmed, -1, False, metadata)


def delete_ledgers(client: LedgerClient, ledger_ids: Iterable[int], password: bytes) -> set[int]:
    """Delete each ledger with ``password`` (or the client's repair key); returns the ids now gone (a
    ledger deleted before counts as gone; one this authority cannot delete is kept and logged)."""
    gone = set()
    for ledger_id in ledger_ids:
        try:
            client.delete_ledger(ledger_id, password)
        except NoSuchLedgerError:
            pass
        except UnauthorizedError as exc:
            log.warning("ledger %d not deleted: %s", ledger_id, exc)
            continue
        gone.add(ledger_id)
    return gone


def discard_writer(client: LedgerClient, writer: LedgerWriter, password: bytes, why: str) -> None:
    """Close and delete a ledger that never became part of a log (best effort: a failure is logged)."""
    try:
        writer.close()
        client.delete_ledger(writer.ledger_id, password)
    except LedgerError:
        log.warning("could not discard ledger %d (%s); it stays as an orphan", writer.ledger_id, why,
                    exc_info=True)
