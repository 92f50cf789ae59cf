"""Batch reads of a ``ledger`` stream: plan entry ranges on the driver, decode them into Arrow on executors.

``spark.read.format("ledger")`` makes a ``LedgerBatchReader``. Its
``partitions()`` runs in Spark's planner process: it resolves startingOffsets
and endingOffsets against each partition's log (``planning``), checks the
start for data loss (failOnDataLoss) and the ledgers between start and end
for ledgers lost under the stream (failing, or skipping them with a warning), and cuts the entries between them into
``LedgerRangePartition`` input partitions, one ledger's entry range each, of
at most ``SPLIT_BYTES``, of even size (so one big ledger is read by several
tasks, none of them a small leftover). Only
confirmed entries are planned: a CLOSED ledger to its last entry, an OPEN one
to its last add confirmed, and no ledger after an open one.

``read()`` runs in an executor's Python worker: it opens the range's ledger
without recovery (a writer still appending is undisturbed) through the
worker's cached client (``executor``) and yields one Arrow record batch per
entry, decoded zero-copy from the payload and conformed to the exact Arrow
schema Spark expects; no row is ever converted to Python objects. Rows come
in commit order within a stream partition, since input partitions are listed
in (stream partition, ledger, entry) order.

``read_partition`` is shared with the streaming reader.
"""
from __future__ import annotations

import logging
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pyspark_ledger.entry import verify_password
from pyspark_ledger.errors import DataLossError, InvalidConfigurationError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.log.log_spans import PartitionLog
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.spark.arrow_codec import decode_batch
from pyspark_ledger.spark.executor import ledger_client, stream_client
from pyspark_ledger.spark.options import ReadOptions
from pyspark_ledger.spark.planning import ReadRange, check_lost, check_position, plan_ranges, resolve_offsets
from pyspark_ledger.spark.schema import METADATA_FIELDS, add_metadata_columns, conform_batch, spark_to_arrow_schema

log = logging.getLogger(__name__)
MiB = 1024 * 1024
#: Bytes of entries one input partition reads, at most (the option maxPartitionBytes changes it): Spark's own
#: default for file sources (spark.sql.files.maxPartitionBytes). Smaller splits make more tasks, each paying a
#: task's start (Spark's JVM and its Python worker about 0.1 CPU s each time, opening the ledger, an idle
#: first range read before the read-ahead fills): docs/measurements.md, "Input split size". Larger ones
#: leave cores idle where a stream has fewer splits than the cluster has cores.
SPLIT_BYTES = 128 * MiB
#: What reading one entry costs beyond its bytes (a range read round trip, decoding), counted
#: against SPLIT_BYTES so that a log of tiny entries is not read by a swarm of tiny tasks.
ENTRY_COST_BYTES = 64 * 1024
#: How long a task waits for an entry it was planned to read but its reader does not yet see.
CONFIRM_WAIT_S = 30.0


class LedgerRangePartition(InputPartition):
    """One Spark input partition: entries first..last of one ledger of one stream partition."""

    def __init__(self, read_range: ReadRange) -> None:
        super().__init__(read_range)
        self.read_range = read_range


class LedgerBatchReader(DataSourceReader):
    """The batch reader of ``format("ledger")`` (see the module docstring)."""

    def __init__(self, options: ReadOptions, schema) -> None:
        self.options = options
        self.arrow_schema = spark_to_arrow_schema(schema)

    def partitions(self) -> list[LedgerRangePartition]:
        ranges = plan_batch(self.options, stream_logs(self.options))
        check_password(self.options, ranges)
        return [LedgerRangePartition(item) for item in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, self.arrow_schema, partition)


# --- planning (driver) ------------------------------------------------------------------------


def stream_logs(options: ReadOptions) -> dict[int, PartitionLog]:
    """What each partition's log holds now (open ledgers are asked for their LAC with the password).

    The password is first verified against the stream's check (UnauthorizedError naming the option).
    """
    streams = stream_client(options.metadata_service_uri, options.password_bytes, options.tls)
    streams.verify_password(options.stream)
    try:
        return streams.partition_logs(options.stream)
    except UnauthorizedError as exc:
        raise _wrong_password(options, exc) from exc


def check_password(options: ReadOptions, ranges: list[ReadRange]) -> None:
    """Fail on the driver, not in every task, if the password does not open the first ledger to read."""
    if not ranges:
        return
    client = ledger_client(options.metadata_service_uri, options.password_bytes, options.tls)
    try:
        verify_password(options.password_bytes, client.ledger_metadata(ranges[0].ledger_id).password_check)
    except UnauthorizedError as exc:
        raise _wrong_password(options, exc) from exc
    except NoSuchLedgerError:
        return  # deleted since it was planned: read() reports it (failOnDataLoss)


def plan_batch(options: ReadOptions, logs: Mapping[int, PartitionLog]) -> list[ReadRange]:
    """The entry ranges of a batch read, in (partition, ledger, entry) order."""
    starts = resolve_offsets(options.starting_offsets, logs)
    ends = resolve_offsets(options.ending_offsets, logs)
    ranges: list[ReadRange] = []
    for partition, partition_log in sorted(logs.items()):
        begin = start_position(options, partition, starts[partition], partition_log)
        stop = end_position(partition, ends[partition], partition_log)
        if stop < begin:
            if starts[partition] <= stop or _same_slot(partition_log, stop, begin):
                continue  # nothing between them, or entries were lost (failOnDataLoss=false)
            raise InvalidConfigurationError(
                f"options startingOffsets and endingOffsets put partition {partition} of stream "
                f"{options.stream!r} at {starts[partition]} and {stop}: the end is before the start")
        skip_lost(options, partition, begin, stop, partition_log)
        ranges += plan_ranges(partition, begin, stop, partition_log,
                              max_entries_per_range=entries_per_split(partition_log, options.max_partition_bytes))
    return ranges


def skip_lost(options: ReadOptions, partition: int, begin: LogPosition, stop: LogPosition,
              partition_log: PartitionLog) -> None:
    """Fail on the driver naming a lost ledger between ``begin`` and ``stop`` (failOnDataLoss), else warn."""
    for warning in check_lost(options.stream, partition, begin, stop, partition_log,
                              fail_on_data_loss=options.fail_on_data_loss):
        log.warning("%s", warning)


def start_position(options: ReadOptions, partition: int, position: LogPosition,
                   partition_log: PartitionLog) -> LogPosition:
    """``position`` if the log holds it; else raise (failOnDataLoss) or warn and move to where reading resumes."""
    loss = check_position(partition, position, partition_log, fail_on_data_loss=options.fail_on_data_loss)
    if loss is None:
        return position
    log.warning("stream %r: %s", options.stream, loss.message)
    return loss.resume_at


def end_position(partition: int, position: LogPosition, partition_log: PartitionLog) -> LogPosition:
    """An endingOffsets position checked against the log's readable end."""
    if position > partition_log.end:
        raise InvalidConfigurationError(
            f"option endingOffsets puts partition {partition} at {position}, beyond the readable end of its "
            f"log ({partition_log.end}); only confirmed entries can be read: use 'latest' or an earlier position")
    span = partition_log.span(position.ledger_seq)
    if span is not None and position.entry_id > span.entry_count:
        raise InvalidConfigurationError(
            f"option endingOffsets puts partition {partition} at {position}, but ledger {span.ledger_seq} of "
            f"its log ends at entry {span.last_entry_id}: use {span.end} or an earlier position")
    return position


def _same_slot(partition_log: PartitionLog, first: LogPosition, second: LogPosition) -> bool:
    """True if no entry lies between two positions (e.g. the end of a ledger and the start of the next)."""
    return partition_log.backlog(first)[0] == partition_log.backlog(second)[0]


def entries_per_split(partition_log: PartitionLog, split_bytes: int | None = None) -> int:
    """How many entries of this log one input partition reads (its mean entry size against ``split_bytes``, the
    option maxPartitionBytes, by default SPLIT_BYTES)."""
    entries = sum(span.entry_count for span in partition_log.spans)
    size = sum(span.length for span in partition_log.spans)
    mean = size // entries if entries > 0 else 0
    return max(1, (split_bytes or SPLIT_BYTES) // (mean + ENTRY_COST_BYTES))


# --- reading (executors) ----------------------------------------------------------------------


def read_partition(options: ReadOptions, arrow_schema: pa.Schema,
                   partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The batches of one input partition; none for the placeholder Spark adds when nothing was planned."""
    if not isinstance(partition, LedgerRangePartition):
        return iter(())
    return read_range(options, arrow_schema, partition.read_range)


def read_range(options: ReadOptions, arrow_schema: pa.Schema, read: ReadRange) -> Iterator[pa.RecordBatch]:
    """The record batches of the range's entries, each conformed to ``arrow_schema`` (Spark's)."""
    client = ledger_client(options.metadata_service_uri, options.password_bytes, options.tls)
    try:
        reader = client.open_ledger(read.ledger_id, options.password_bytes, recovery=False)
    except NoSuchLedgerError as exc:
        _ledger_gone(options, read, exc)
        return
    except UnauthorizedError as exc:
        raise _wrong_password(options, exc) from exc
    if reader.last_add_confirmed < read.last_entry_id:
        reader.wait_for_entry(read.last_entry_id, CONFIRM_WAIT_S)
    data_schema = _data_schema(arrow_schema) if options.include_metadata else arrow_schema
    for entry in reader.read(read.first_entry_id, read.last_entry_id, copy=False):
        batch = conform_batch(decode_batch(entry.data), data_schema)
        if options.include_metadata:
            batch = add_metadata_columns(batch, read.partition, read.ledger_id, entry.entry_id)
        yield batch


def _data_schema(arrow_schema: pa.Schema) -> pa.Schema:
    """The read schema without the metadata columns that ``add_metadata_columns`` appends."""
    names = {field.name for field in METADATA_FIELDS}
    return pa.schema([field for field in arrow_schema if field.name not in names])


def _wrong_password(options: ReadOptions, exc: UnauthorizedError) -> UnauthorizedError:
    given = "is not set (empty)" if not options.password else "does not match"
    return UnauthorizedError(f"option password {given}: the ledgers of stream {options.stream!r} were written "
                             f"with another password ({exc}); give the password the stream's writers use")


def _ledger_gone(options: ReadOptions, read: ReadRange, exc: NoSuchLedgerError) -> None:
    where = (f"stream {options.stream!r} partition {read.partition}: ledger {read.ledger_id} (sequence number "
             f"{read.ledger_seq} of the log) was deleted after this read was planned (truncated by retention "
             f"or overwrite), so its entries {read.first_entry_id}..{read.last_entry_id} are lost")
    if options.fail_on_data_loss:
        raise DataLossError(f"{where}. Set the option failOnDataLoss=false to skip them") from exc
    log.warning("%s; skipping them (failOnDataLoss=false)", where)
