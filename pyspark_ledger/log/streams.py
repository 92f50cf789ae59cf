"""The stream registry: create, open, list and delete streams; their schema and partition count.

A stream is a name, a number of partitions (each a log of ledgers), the
replication settings of its ledgers and, optionally, an Arrow schema stored as
the bytes of ``pyspark_ledger.log.stream_schema.encode_stream_schema`` (pyarrow is
imported only to encode a ``pyarrow.Schema`` or to decode one on request).

The record keeps a salted check of the password the stream's ledgers are
written with (``stream_password``): changing the schema or the partition
count needs that password; describing and listing a stream do not.

Deleting is resumable: the record is first marked DELETING (no more writes or
commits; its ledgers listed as garbage), open ledgers are fenced so writers
fail instead of writing into deleted ledgers, the ledgers are deleted, then the
record. If that is interrupted, ``delete_stream`` again finishes it; until then
the name cannot be created anew and ``list_streams`` omits it. Deleting needs
the stream's password, or a client holding the cluster's repair key.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from pyspark_ledger.errors import (InvalidArgumentError, MetadataError, MetadataExistsError,
                                   MetadataVersionConflictError, NoSuchKeyError, NoSuchLedgerError)
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_partition_count, check_replication, check_schema, check_stream_name
from pyspark_ledger.log.ledgers import delete_ledgers, fence_ledgers
from pyspark_ledger.log.log_metadata import ACTIVE, DELETING, Replication, StreamRecord
from pyspark_ledger.log.log_transitions import add_partitions, check_active, mark_deleting, new_stream, set_schema
from pyspark_ledger.log.stream_password import check_record, stream_password_check, verify_password
from pyspark_ledger.log.stream_store import (create_stream_record, delete_stream_record, list_stream_names,
                                             read_stream, update_stream)
from pyspark_ledger.metadata.update_loop import RetryPolicy

log = logging.getLogger(__name__)
#: deleting starts again when the record changed under it (e.g. another deleter)
DELETE_RETRY = RetryPolicy(attempts=20)


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream as stored: name, partition count, replication, schema bytes (or None)."""

    name: str
    uid: str
    partitions: int
    replication: Replication
    schema: bytes | None
    ctime_ms: int

    @classmethod
    def of(cls, record: StreamRecord) -> "StreamInfo":
        return cls(record.name, record.uid, record.partition_count, record.replication, record.schema,
                   record.ctime_ms)

    def arrow_schema(self) -> Any:
        """The stored schema as a ``pyarrow.Schema`` (imports pyarrow); None if none is stored."""
        if self.schema is None:
            return None
        from pyspark_ledger.log.stream_schema import decode_stream_schema
        return decode_stream_schema(self.schema)


def create_stream(ctx: LogContext, name: str, partitions: int, schema: Any = None, *, ensemble_size: int = 3,
                  write_quorum: int = 3, ack_quorum: int = 2, digest: str = "crc32c") -> StreamInfo:
    """A new empty stream; MetadataExistsError if the name is taken (or still being deleted)."""
    name = check_stream_name(name)
    replication = check_replication(ensemble_size, write_quorum, ack_quorum, digest)
    record = new_stream(name, check_partition_count(partitions), replication, check_schema(schema),
                        uuid.uuid4().hex, ctx.now_ms(), stream_password_check(ctx.password))
    try:
        create_stream_record(ctx.store, record)
    except MetadataExistsError:
        if _state(ctx, name) == DELETING:
            raise MetadataExistsError(f"stream {name!r} is still being deleted: call delete_stream({name!r}) "
                                      "again to finish, then create it") from None
        raise
    log.info("created stream %r with %d partitions", name, partitions)
    return StreamInfo.of(record)


def open_stream(ctx: LogContext, name: str) -> StreamInfo:
    """The stream's description; NoSuchKeyError naming it if it does not exist."""
    return StreamInfo.of(check_active(read_stream(ctx.store, check_stream_name(name)).value))


def list_streams(ctx: LogContext) -> list[str]:
    """Names of the streams (not those being deleted), sorted."""
    return [name for name in list_stream_names(ctx.store) if _state(ctx, name) == ACTIVE]


def update_schema(ctx: LogContext, name: str, schema: Any, replace: bool = False) -> StreamInfo:
    """Store the stream's schema if it has none (or, with ``replace``, change it)."""
    schema_bytes = check_schema(schema)
    if schema_bytes is None:
        raise InvalidArgumentError(f"update_schema of stream {name!r} needs a schema, got None")
    name = check_stream_name(name)
    verify_password(ctx, name, write=True)
    stored, _ = update_stream(ctx.store, name,
                              _password_checked(ctx, lambda record: set_schema(record, schema_bytes, replace)))
    return StreamInfo.of(stored.value)


def grow_partitions(ctx: LogContext, name: str, partitions: int) -> StreamInfo:
    """Add partitions so that the stream has ``partitions`` (never removes any)."""
    count = check_partition_count(partitions)
    name = check_stream_name(name)
    verify_password(ctx, name, write=True)
    stored, _ = update_stream(ctx.store, name, _password_checked(
        ctx, lambda record: None if record.partition_count == count else add_partitions(record, count)))
    return StreamInfo.of(stored.value)


def _password_checked(ctx: LogContext, change: Callable[[StreamRecord], StreamRecord | None]):
    """``change`` as a transition that first checks the password against the record just read (a stream
    deleted and created anew since ``verify_password`` included)."""
    def transition(record: StreamRecord) -> StreamRecord | None:
        check_record(ctx, record)
        return change(record)
    return transition


def delete_stream(ctx: LogContext, name: str, *, retry: RetryPolicy = DELETE_RETRY) -> None:
    """Delete the stream and its ledgers (resumable; see the module docstring).

    Needs the stream's password (UnauthorizedError otherwise, nothing changed), or a client holding the
    cluster's repair key, which opens every ledger of the stream. A record changed between its marking
    and its removal is read again, as ``retry`` allows; then MetadataError.
    """
    name = check_stream_name(name)
    if ctx.client.repair_key_id is None:
        verify_password(ctx, name, write=False)
    for attempt in retry.tries():
        try:
            marked, _ = update_stream(ctx.store, name,
                                      lambda record: None if record.state == DELETING else mark_deleting(record))
        except NoSuchKeyError:
            if attempt == 1:
                raise
            return  # another deleter finished it
        garbage = marked.value.garbage
        open_ids = [ledger_id for ledger_id in garbage if _is_open(ctx, ledger_id)]
        _fence(ctx, open_ids)
        delete_ledgers(ctx.client, garbage, ctx.password)
        try:
            delete_stream_record(ctx.store, name, marked.version)
        except MetadataVersionConflictError:
            continue  # changed meanwhile (e.g. another deleter): read it again
        log.info("deleted stream %r and its %d ledgers", name, len(garbage))
        return
    raise MetadataError(f"stream {name!r} kept changing while it was being deleted ({retry.attempts} attempts); "
                        "try again")


def _fence(ctx: LogContext, ledger_ids: list[int]) -> None:
    """Fence the open ledgers with the stream's password, or with the repair key the client holds."""
    if ctx.client.repair_key_id is None:
        fence_ledgers(ctx.client, ledger_ids, ctx.password)
        return
    for ledger_id in ledger_ids:
        try:
            ctx.client.recover_ledger(ledger_id, None, passwords=[ctx.password])
        except NoSuchLedgerError:
            continue


def _state(ctx: LogContext, name: str) -> str | None:
    try:
        return read_stream(ctx.store, name).value.state
    except NoSuchKeyError:
        return None


def _is_open(ctx: LogContext, ledger_id: int) -> bool:
    try:
        return not ctx.client.ledger_metadata(ledger_id).is_closed
    except NoSuchLedgerError:
        return False
