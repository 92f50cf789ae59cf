"""The public façade of the log layer: streams, partition logs, exactly-once commits, retention.

::

    with StreamClient("sqlite:///tmp/meta.db", password=b"pw") as streams:
        streams.create_stream("orders", partitions=4)
        with streams.open_writer("orders", 0, RollPolicy(max_entries=10_000)) as writer:
            position = writer.append(b"...")
        for entry in streams.open_reader("orders", 0).entries():
            ...

One ``StreamClient`` holds one metadata store and one ``LedgerClient``; pass
a URI (both are opened and owned, closed by ``close()``) or a MetadataStore
the caller keeps owning (with, optionally, a LedgerClient built on that same
store). ``now_ms`` replaces the wall clock (milliseconds) that commits and
retention use, for tests. ``password`` protects every ledger of the streams it writes; readers
need the same one. A stream keeps a salted check of the password it was created with
(``stream_password``): writers, readers and commits with another one fail with
UnauthorizedError before any ledger is created; the error names the password as
``password_name`` says (default: this class's parameter password). No protocol
decision is made here: each method delegates to the module that owns it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.log import commits, log_views, orphans, retention, stream_password, stream_repair, streams
from pyspark_ledger.log.context import DEFAULT_PASSWORD_NAME, LogContext
from pyspark_ledger.log.inputs import check_partition
from pyspark_ledger.log.ledgers import create_stream_ledger
from pyspark_ledger.log.log_reader import DEFAULT_POLL_INTERVAL_S, LogReader
from pyspark_ledger.log.log_spans import PartitionLog
from pyspark_ledger.log.log_transitions import check_active
from pyspark_ledger.log.log_writer import LogWriter, RollPolicy, open_log_writer
from pyspark_ledger.log.positions import EARLIEST
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.store import MetadataStore

if TYPE_CHECKING:  # the client is imported when one is made: a given one may never need gRPC
    from pyspark_ledger.client.ledger_client import LedgerClient
    from pyspark_ledger.client.writer import LedgerWriter


class StreamClient:
    """Entry point of the log layer (see the module docstring)."""

    def __init__(self, metadata: str | MetadataStore, *, password: bytes | str = b"",
                 config: ClientConfig | None = None, client: LedgerClient | None = None, transport=None,
                 now_ms: Callable[[], int] | None = None, password_name: str = DEFAULT_PASSWORD_NAME) -> None:
        if isinstance(password, str):
            password = password.encode()
        if not isinstance(password, (bytes, bytearray)):
            raise InvalidArgumentError(f"password must be bytes (or str), got {type(password).__name__}")
        if isinstance(metadata, str):
            if client is not None:
                raise InvalidArgumentError("pass a LedgerClient only together with the MetadataStore it uses")
            store, self._owns_store = open_metadata_store(metadata), True
        elif isinstance(metadata, MetadataStore):
            store, self._owns_store = metadata, False
        else:
            raise InvalidConfigurationError(f"StreamClient needs a metadata URI ('sqlite:///abs/path/meta.db', "
                                            f"'zk://host:port/chroot') or a MetadataStore, got {metadata!r}")
        self._owns_client = client is None
        if client is None:
            from pyspark_ledger.client.ledger_client import LedgerClient
            client = LedgerClient(store, config, transport=transport)
        clock = {} if now_ms is None else {"now_ms": now_ms}
        self._ctx = LogContext(store, client, bytes(password), password_name=password_name, **clock)
        self._ends: log_views.EndCache = {}

    @property
    def context(self) -> LogContext:
        """Store, client and password, for the module-level functions of the log layer."""
        return self._ctx

    @property
    def client(self) -> LedgerClient:
        """The replication client (to read ledger metadata, or for the Spark writer tasks)."""
        return self._ctx.client

    # --- streams -----------------------------------------------------------------------
    def create_stream(self, name: str, partitions: int, schema: Any = None, *, ensemble_size: int = 3,
                      write_quorum: int = 3, ack_quorum: int = 2, digest: str = "crc32c") -> streams.StreamInfo:
        """A new empty stream; ``schema`` is a pyarrow.Schema, its encoded bytes, or None."""
        return streams.create_stream(self._ctx, name, partitions, schema, ensemble_size=ensemble_size,
                                     write_quorum=write_quorum, ack_quorum=ack_quorum, digest=digest)

    def open_stream(self, name: str) -> streams.StreamInfo:
        """The stream's description (needs no password)."""
        return streams.open_stream(self._ctx, name)

    def verify_password(self, name: str, *, write: bool = False) -> streams.StreamInfo:
        """The stream's description once this client's password is verified against the stream's.

        UnauthorizedError naming ``password_name`` if it does not match; ``write``: see
        ``stream_password.verify_password`` (an old stream without ledgers takes a writer's password).
        """
        return streams.StreamInfo.of(check_active(stream_password.verify_password(self._ctx, name, write=write)))

    def list_streams(self) -> list[str]:
        return streams.list_streams(self._ctx)

    def delete_stream(self, name: str) -> None:
        """Delete the stream and its ledgers; needs its password or a client holding the repair key."""
        streams.delete_stream(self._ctx, name)

    def repair_stream(self, name: str, *, dry_run: bool = False) -> stream_repair.RepairResult:
        """Drop the lost ledgers (metadata gone) at the head of each partition's log (``stream_repair``)."""
        return stream_repair.repair_stream(self._ctx, name, dry_run=dry_run)

    def set_schema(self, name: str, schema: Any, replace: bool = False) -> streams.StreamInfo:
        return streams.update_schema(self._ctx, name, schema, replace)

    def add_partitions(self, name: str, partitions: int) -> streams.StreamInfo:
        """Grow the stream to ``partitions`` partitions."""
        return streams.grow_partitions(self._ctx, name, partitions)

    # --- partition logs ----------------------------------------------------------------
    def open_writer(self, stream: str, partition: int, policy: RollPolicy | None = None, *,
                    is_leader: Callable[[], bool] | None = None) -> LogWriter:
        """Become the single writer of a partition (fences the previous writer)."""
        return open_log_writer(self._ctx, stream, partition, policy, is_leader=is_leader)

    def open_reader(self, stream: str, partition: int, start=EARLIEST, *,
                    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S, fail_on_data_loss: bool = True) -> LogReader:
        """A reader of one partition's log; ``fail_on_data_loss=False`` skips lost ledgers with a warning."""
        return LogReader(self._ctx, stream, partition, start, poll_interval_s=poll_interval_s,
                         fail_on_data_loss=fail_on_data_loss)

    def partition_logs(self, stream: str) -> dict[int, PartitionLog]:
        """What each partition's log holds now, for read planning."""
        return log_views.partition_logs(self._ctx, stream, self._ends)

    # --- exactly-once commits (Spark sink) -------------------------------------------------
    def create_ledger(self, stream: str, partition: int) -> LedgerWriter:
        """A new ledger for a writer task, with the stream's replication; commit it once closed."""
        record = check_active(stream_password.verify_password(self._ctx, stream, write=True))
        check_partition(partition, record.partition_count, stream)
        return create_stream_ledger(self._ctx.client, record.replication, self._ctx.password, stream, partition)

    def commit_ledgers(self, stream: str, writer_id: str, batch_id: int, ledgers: Mapping[int, Sequence[int]], *,
                       remember_writer: bool = True) -> commits.CommitResult:
        """Append closed ledgers once per (writer, batch); ``remember_writer=False`` for one-off commits."""
        return commits.commit_ledgers(self._ctx, stream, writer_id, batch_id, ledgers,
                                      remember_writer=remember_writer)

    def last_committed_batch(self, stream: str, writer_id: str) -> int | None:
        return commits.last_committed_batch(self._ctx, stream, writer_id)

    def abort_ledgers(self, stream: str, ledger_ids: Iterable[int]) -> set[int]:
        return commits.abort_ledgers(self._ctx, stream, ledger_ids)

    # --- retention -----------------------------------------------------------------------
    def truncate_before(self, stream: str, partition: int, position) -> retention.TruncationResult:
        return retention.truncate_before(self._ctx, stream, partition, position)

    def truncate_older_than(self, stream: str, max_age_s: float,
                            partitions: Iterable[int] | None = None) -> retention.TruncationResult:
        return retention.truncate_older_than(self._ctx, stream, max_age_s, partitions)

    def truncate_all(self, stream: str) -> retention.TruncationResult:
        return retention.truncate_all(self._ctx, stream)

    def collect_garbage(self, stream: str) -> frozenset[int]:
        return retention.collect_garbage(self._ctx, stream)

    def collect_orphans(self, stream: str, min_age_s: float = orphans.DEFAULT_MIN_AGE_S, *,
                        dry_run: bool = False) -> orphans.OrphanSweep:
        """Delete the stream's ledgers that no log references, created ``min_age_s`` ago or earlier.

        Safe against commits in flight (see ``pyspark_ledger.log.orphans``); ``dry_run`` only lists them.
        """
        return orphans.collect_orphans(self._ctx, stream, min_age_s, dry_run)

    # --- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Close the client and store this object opened (idempotent)."""
        if self._owns_client:
            self._ctx.client.close()
        if self._owns_store:
            self._ctx.store.close()

    def __enter__(self) -> "StreamClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
