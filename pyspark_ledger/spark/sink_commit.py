"""The driver's side of a ``ledger`` write: commit every task's ledgers at once, or abort them.

``commit_write(plan, messages, writer_id, batch_id)``:

1. the stream: the one the plan found, or else created now with the plan's
   schema and replication and ``partitions`` = the option, or the number of
   write tasks (``len(messages)``). If another writer created it meanwhile,
   its schema must fit the data (else a clear error; Spark then aborts);
2. the ledgers: each task's go to ``partition % (the stream's partition
   count)``, in task order, so a partition reads its rows in commit order;
3. ONE compare-and-set of the stream record appends them all and records
   ``batch_id`` as the writer's last (``StreamClient.commit_ledgers``); with
   ``overwrite`` the same CAS first truncates every partition
   (``sink_overwrite``). A batch the writer had already committed (a replay)
   changes nothing: this attempt's ledgers are deleted and the commit succeeds.

``abort_write(plan, messages)`` deletes the ledgers the finished tasks name
(``StreamClient.abort_ledgers`` keeps any a log holds; tasks that failed
deleted their own). Batch writes commit under a fresh writer id and batch 0
with ``remember_writer=False`` (Spark never replays a batch job's commit, so
the stream need not remember its id); streaming writes under the query's
writer id and Spark's batch id, remembered to make replays no-ops.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

from pyspark_ledger.errors import MetadataExistsError, NoSuchKeyError
from pyspark_ledger.log.commits import CommitResult
from pyspark_ledger.log.ledgers import delete_ledgers
from pyspark_ledger.log.streams import StreamInfo
from pyspark_ledger.spark.executor import stream_client
from pyspark_ledger.spark.sink_overwrite import commit_replacing
from pyspark_ledger.spark.sink_plan import SinkPlan, target_schema
from pyspark_ledger.spark.sink_task import LedgerCommitMessage

log = logging.getLogger(__name__)


def commit_write(plan: SinkPlan, messages: Sequence[LedgerCommitMessage | None], writer_id: str,
                 batch_id: int, *, remember_writer: bool = True) -> CommitResult:
    """Commit a write (or one micro-batch of it) exactly once; see the module docstring."""
    done = finished(messages)
    streams = stream_client(plan.uri, plan.password, plan.tls)
    info = _target_stream(streams, plan, len(messages))
    ledgers = group_ledgers(done, info.partitions)
    if plan.overwrite:
        result = commit_replacing(streams.context, plan.stream, writer_id, batch_id, ledgers,
                                  remember_writer=remember_writer)
    else:
        result = streams.commit_ledgers(plan.stream, writer_id, batch_id, ledgers, remember_writer=remember_writer)
    if not result.committed:
        ids = ledger_ids(done)
        log.info("stream %r: writer %r had committed batch %d already; deleting this attempt's %d ledgers",
                 plan.stream, writer_id, batch_id, len(ids))
        streams.abort_ledgers(plan.stream, ids)
    return result


def abort_write(plan: SinkPlan, messages: Sequence[LedgerCommitMessage | None]) -> set[int]:
    """Delete the ledgers of the tasks that finished; the ids deleted."""
    ids = ledger_ids(finished(messages))
    if not ids:
        return set()
    streams = stream_client(plan.uri, plan.password, plan.tls)
    try:
        return streams.abort_ledgers(plan.stream, ids)
    except NoSuchKeyError:  # the stream was never created: no log can hold the ledgers
        return delete_ledgers(streams.client, ids, plan.password)


def finished(messages: Iterable[LedgerCommitMessage | None]) -> list[LedgerCommitMessage]:
    """The messages of the tasks that finished (Spark passes None for the others), in task order."""
    done = [message for message in messages if message is not None]
    return sorted(done, key=lambda message: message.task_partition)


def ledger_ids(messages: Iterable[LedgerCommitMessage]) -> list[int]:
    return [ledger_id for message in messages for ledger_id in message.ledger_ids]


def group_ledgers(messages: Sequence[LedgerCommitMessage], partition_count: int) -> dict[int, list[int]]:
    """``{stream partition: ledger ids}``, each partition's ledgers in task order."""
    grouped: dict[int, list[int]] = {}
    for message in messages:
        if message.ledger_ids:
            grouped.setdefault(message.partition % partition_count, []).extend(message.ledger_ids)
    return grouped


def _target_stream(streams, plan: SinkPlan, task_count: int) -> StreamInfo:
    """The stream to commit to, created if the plan found none (see the module docstring)."""
    try:
        return _checked(streams, plan, streams.open_stream(plan.stream))
    except NoSuchKeyError:
        if plan.exists:
            raise NoSuchKeyError(f"stream {plan.stream!r} was deleted while it was being written: write "
                                 "again to create it anew") from None
    replication = plan.replication
    partitions = plan.partition_count or max(task_count, 1)
    try:
        info = streams.create_stream(plan.stream, partitions, plan.schema, ensemble_size=replication.ensemble_size,
                                     write_quorum=replication.write_quorum, ack_quorum=replication.ack_quorum,
                                     digest=replication.digest)
    except MetadataExistsError:
        return _checked(streams, plan, streams.open_stream(plan.stream))
    log.info("created stream %r with %d partitions for a Spark write", plan.stream, partitions)
    return info


def _checked(streams, plan: SinkPlan, info: StreamInfo) -> StreamInfo:
    if not plan.exists:  # created by someone else after the plan: check what they chose
        target_schema(streams, plan.stream, info.arrow_schema(), plan.schema)
    return info
