"""One write task of the ``ledger`` sink: its Arrow batches into a new ledger it owns.

``write_task(plan, batches, task_partition)`` conforms each batch to the
stream's schema, cuts them into entries of ``rowsPerEntry`` rows (under the
entry size limit; ``arrow_codec.entry_batches``), and appends them, pipelined,
to ONE new ledger created for the task's partition and tagged with the stream.
At most ``MAX_INFLIGHT_BYTES`` of entries wait for their acknowledgements at
a time, so a fast producer cannot fill the worker's memory. The ledger is then
closed and the task returns a ``LedgerCommitMessage`` naming it; it becomes
part of the stream only when the driver commits (``sink_commit``). A task with
no rows creates no ledger.

If anything fails inside the task, its ledger is closed and deleted (best
effort: a failure to delete is logged) and the error is raised again, so
Spark's retry of the task starts clean. The client is the worker process's
cached one (``executor.ledger_client``); a task never closes it.
"""
from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from pyspark_ledger.errors import LedgerClosedError, LedgerError, NoSuchLedgerError
from pyspark_ledger.log.ledgers import create_stream_ledger
from pyspark_ledger.spark.arrow_codec import encode_batch, entry_batches
from pyspark_ledger.spark.executor import ledger_client
from pyspark_ledger.spark.schema import conform_batch
from pyspark_ledger.spark.sink_plan import SinkPlan

log = logging.getLogger(__name__)
#: Entry bytes a task keeps unacknowledged. A few entries in flight keep the bookies busy on a local
#: network; more only add latency to each add, and under load a slow add counts as a failed bookie
#: (the client's add timeout) and forces an ensemble change.
MAX_INFLIGHT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class LedgerCommitMessage(WriterCommitMessage):
    """What one task wrote: its ledgers (closed, in order) for one stream partition, and counts."""

    task_partition: int  # Spark's partition id of the task
    partition: int  # the stream partition its ledgers were created for
    ledger_ids: tuple[int, ...]
    rows: int
    entries: int
    bytes: int


class _Pipeline:
    """Appends in flight on one ledger, waited for oldest first beyond a byte budget."""

    def __init__(self, writer, max_inflight_bytes: int) -> None:
        self._writer = writer
        self._budget = max_inflight_bytes
        self._pending: deque[tuple[Future, int]] = deque()
        self._inflight = 0

    def append(self, payload: bytes) -> None:
        while self._pending and self._inflight + len(payload) > self._budget:
            self._wait_oldest()
        self._pending.append((self._writer.append_async(payload), len(payload)))
        self._inflight += len(payload)

    def drain(self) -> None:
        while self._pending:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        future, size = self._pending.popleft()
        self._inflight -= size
        future.result()  # raises the add's failure


class _TaskLedger:
    """The task's ledger, created with its first entry, and what went into it."""

    def __init__(self, plan: SinkPlan, partition: int) -> None:
        self._plan, self.partition = plan, partition
        self._writer = None
        self._pipeline: _Pipeline | None = None
        self.rows = self.entries = self.bytes = 0

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return () if self._writer is None else (self._writer.ledger_id,)

    def append(self, batch: pa.RecordBatch) -> None:
        if self._pipeline is None:
            client = self._client()
            self._writer = create_stream_ledger(client, self._plan.replication, self._plan.password,
                                                self._plan.stream, self.partition)
            self._pipeline = _Pipeline(self._writer, MAX_INFLIGHT_BYTES)
        payload = encode_batch(batch, self._plan.compression)
        self._pipeline.append(payload)
        self.rows, self.entries, self.bytes = self.rows + batch.num_rows, self.entries + 1, self.bytes + len(payload)

    def _client(self):
        plan = self._plan
        return ledger_client(plan.uri, plan.password, plan.tls, plan.min_ack_quorum_zones)

    def finish(self) -> None:
        """Wait for every add, close the ledger, check it holds every entry."""
        if self._pipeline is None:
            return
        self._pipeline.drain()
        self._writer.close()
        last = self._writer.metadata.last_entry_id
        if last != self.entries - 1:
            raise LedgerClosedError(f"ledger {self._writer.ledger_id} closed at entry {last} but {self.entries} "
                                    "entries were written to it: the task fails and Spark retries it")

    def discard(self) -> None:
        """Close and delete the ledger of a failed task; never raises (the task's own error matters)."""
        if self._writer is None:
            return
        ledger_id = self._writer.ledger_id
        try:
            self._writer.close()
        except LedgerError:
            log.debug("closing ledger %d of a failed task failed", ledger_id, exc_info=True)
        try:
            self._client().delete_ledger(ledger_id, self._plan.password)
        except NoSuchLedgerError:
            pass
        except LedgerError:
            log.warning("could not delete ledger %d of a failed write task of stream %r; it stays as an orphan",
                        ledger_id, self._plan.stream, exc_info=True)
        else:
            log.info("deleted ledger %d of a failed write task of stream %r", ledger_id, self._plan.stream)


def write_task(plan: SinkPlan, batches: Iterable[pa.RecordBatch], task_partition: int) -> LedgerCommitMessage:
    """Write one task's batches into a new ledger of ``plan.stream``; see the module docstring."""
    output = _TaskLedger(plan, plan.partition_of(task_partition))
    try:
        for batch in entry_batches(_conformed(batches, plan.schema), plan.rows_per_entry, plan.max_entry_bytes):
            output.append(batch)
        output.finish()
    except BaseException:
        output.discard()
        raise
    return LedgerCommitMessage(task_partition, output.partition, output.ledger_ids, output.rows, output.entries,
                               output.bytes)


def _conformed(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield conform_batch(batch, schema)
