"""What a write to the ``ledger`` sink decides on the driver before any task runs: the ``SinkPlan``.

``plan_sink`` parses the options, turns the DataFrame's Spark schema into the
Arrow schema a stream stores, and looks the stream up:

- an existing stream must have the option password as its password (the
  stream keeps a check of it: ``log.stream_password``), else UnauthorizedError
  naming the option, before any task runs;
- enough writable bookies must be registered for the ensemble size (the
  stream's, or option ``ensembleSize`` for a new one), else NotEnoughBookiesError
  naming E, how many are live and what to do (``log.writable_bookies``, which
  ``LogWriter`` uses too); with option ``minAckQuorumZones`` >= 2, the ack
  quorum must allow it and the bookies' zones must give it (same module);
  the quorum rules were checked with the options
  (``options``), and an existing stream's stored ones are checked here;
- an existing stream fixes the schema the tasks conform their batches to
  (an incompatible DataFrame is refused here, naming every differing field),
  its replication and its partition count: task ``t`` writes partition
  ``t % partitions``;
- a missing stream is created by the driver's commit, when the number of
  write tasks is known (the default of option ``partitions``). Until then the
  tasks write ledgers with the replication of the options, task ``t`` into
  partition ``t`` (``t % partitions`` when the option is given); the commit
  maps every task's ledgers to ``partition % (the stream's partition count)``,
  which is the identity unless another writer created the stream first.

A stream made through the log API without a schema takes the DataFrame's if
it holds no ledger yet; one holding entries of unknown form is refused.
The plan is pickled into every task and into the commit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from pyspark_ledger.errors import InvalidStateError, NoSuchKeyError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.stream_store import read_stream
from pyspark_ledger.log.writable_bookies import ReplicationNames, check_bookies_for_write, check_stream_replication
from pyspark_ledger.security.tls import ClientTls
from pyspark_ledger.spark.arrow_codec import DEFAULT_MAX_ENTRY_BYTES
from pyspark_ledger.spark.executor import stream_client
from pyspark_ledger.spark.options import DEFAULT_ROWS_PER_ENTRY, WriteOptions
from pyspark_ledger.spark.schema import check_compatible, spark_to_arrow_schema, stored_schema


#: How the sink's errors name the replication settings: as the write's options.
OPTION_NAMES = ReplicationNames("ensembleSize", "writeQuorum", "ackQuorum", "option minAckQuorumZones",
                                fixed="fixed when it was created; the write's replication options do not change it")


@dataclass(frozen=True)
class SinkPlan:
    """The stream a write goes to, the schema and layout its tasks use, and how they cut entries."""

    uri: str
    stream: str
    schema: pa.Schema  # the stored schema; every batch is conformed to it
    replication: Replication
    partition_count: int | None  # the stream's (or option partitions); None: one partition per task
    exists: bool  # the stream existed when the write was planned
    overwrite: bool = False
    rows_per_entry: int = DEFAULT_ROWS_PER_ENTRY
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    compression: str = "none"  # of each entry's Arrow buffers (option compression)
    password: bytes = field(default=b"", repr=False)
    tls: ClientTls | None = None  # the write's TLS options (None: each process's LEDGER_TLS_*)
    min_ack_quorum_zones: int = 1  # the write's minAckQuorumZones option, for the tasks' clients

    def partition_of(self, task_partition: int) -> int:
        """The stream partition task ``task_partition`` writes (see the module docstring)."""
        return task_partition if self.partition_count is None else task_partition % self.partition_count


def plan_sink(options: WriteOptions, spark_schema, *, overwrite: bool) -> SinkPlan:
    """Check the write against the stream (if any) and fix what tasks and commit need."""
    incoming = stored_schema(spark_to_arrow_schema(spark_schema))
    streams = stream_client(options.metadata_service_uri, options.password_bytes, options.tls)
    try:
        info = streams.verify_password(options.stream, write=True)  # before any task creates a ledger
    except NoSuchKeyError:
        plan = _new_stream_plan(options, incoming, overwrite)
        check_bookies_for_write(streams.context.store, plan.uri, plan.stream, plan.replication,
                                stream_exists=False, names=OPTION_NAMES, min_ack_zones=plan.min_ack_quorum_zones)
        return plan
    check_stream_replication(options.stream, info.replication, OPTION_NAMES)
    check_bookies_for_write(streams.context.store, options.metadata_service_uri, options.stream,
                            info.replication, stream_exists=True, names=OPTION_NAMES,
                            min_ack_zones=options.min_ack_quorum_zones)
    schema = target_schema(streams, options.stream, info.arrow_schema(), incoming)
    return SinkPlan(uri=options.metadata_service_uri, stream=options.stream, schema=schema,
                    replication=info.replication, partition_count=info.partitions, exists=True,
                    overwrite=overwrite, rows_per_entry=options.rows_per_entry, compression=options.compression,
                    password=options.password_bytes, tls=options.tls, min_ack_quorum_zones=options.min_ack_quorum_zones)


def _new_stream_plan(options: WriteOptions, incoming: pa.Schema, overwrite: bool) -> SinkPlan:
    replication = Replication(options.ensemble_size, options.write_quorum, options.ack_quorum, options.digest)
    return SinkPlan(uri=options.metadata_service_uri, stream=options.stream, schema=incoming,
                    replication=replication, partition_count=options.partitions, exists=False,
                    overwrite=overwrite, rows_per_entry=options.rows_per_entry, compression=options.compression,
                    password=options.password_bytes, tls=options.tls, min_ack_quorum_zones=options.min_ack_quorum_zones)


def target_schema(streams, stream: str, stored: pa.Schema | None, incoming: pa.Schema) -> pa.Schema:
    """The schema to write ``incoming`` data under: the stream's, checked compatible (or adopted)."""
    if stored is not None:
        check_compatible(stored, incoming, stream=stream)
        return stored
    if read_stream(streams.context.store, stream).value.all_ledger_ids():
        raise InvalidStateError(
            f"stream {stream!r} has no Arrow schema but holds entries (written through the log API, not "
            "by Spark): the ledger data source cannot add rows to it; write to a new stream")
    return stored_schema(streams.set_schema(stream, incoming).arrow_schema())
