"""The demo's Spark side: a quiet local session, the streaming write, its clean stop, the read-back.

- ``start_spark(log_path)``: a local session whose JVM (and the Python
  workers it starts) write their log to ``log_path`` instead of the terminal,
  so the demo's own progress stays readable; tasks may be retried (``local[2,4]``).
- ``start_write``: generated events (``event_source``) into the ``ledger``
  stream, one micro-batch after the other, under the demo's writer id.
- ``finish_write``: creates the source's stop file, waits until the query
  has committed the batch it was in and found no more data, then stops it —
  so no write is cut off half-way.
- ``emitted_rows``: how many events the generator had emitted by the end of a
  given batch, from the query's offset log (its own record of each batch).
- ``read_back``: ``readStream`` of the stream with ``trigger(availableNow=True)``;
  every row is checked by Spark (``events.intact_column``) and only its
  ``(event_id, intact)`` is handed to ``on_rows`` on the driver.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from pyspark_ledger.errors import InvalidConfigurationError, LedgerError

WAITING_FOR_DATA = "Waiting for data to arrive"
POLL_S = 0.2
READ_BYTES_PER_TRIGGER = "128m"
JVM_KILL_WAIT_S = 20.0
AWAIT_S = 1
#: Spark's error when a Python process it started on the driver (a streaming source, a sink's commit) did not
#: connect back within its fixed 10 s: on a loaded machine the interpreter's start alone can take longer.
WORKER_DID_NOT_START = "Python worker failed to connect back"
WRITE_RESTARTS = 3


@dataclass(frozen=True)
class WriteSettings:
    """Where and how the demo's streaming write goes."""

    metadata_uri: str
    stream: str
    writer_id: str
    checkpoint: str
    stop_file: str
    rows_per_batch: int
    rows_per_entry: int
    partitions: int
    min_ack_quorum_zones: int = 1


def start_spark(log_path: Path, cores: int = 2, conf: dict | None = None):
    """A SparkSession whose JVM logs to ``log_path``; its JVM's pid via ``jvm_pid``. Local mode, unless ``conf``
    names a cluster (``spark.master``, ``spark.driver.host``...: ``cluster_target``)."""
    from pyspark_ledger.spark.session import spark_session, spark_unavailable_reason

    reason = spark_unavailable_reason()
    if reason:
        raise InvalidConfigurationError(f"ledger demo needs Spark: {reason}")
    try:
        return spark_session("ledger-demo", cores=cores, log_level="WARN", log_file=log_path,
                             conf=conf or {"spark.master": f"local[{cores},4]"})
    except Exception as exc:  # the helper has ended a JVM that started but failed
        raise LedgerError(f"Spark did not start ({_first_lines(str(exc), 2)}); its log: {log_path}") from exc


def jvm_process():
    """The JVM process pyspark launched for the session (a ``subprocess.Popen``), or None."""
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def jvm_pid() -> int | None:
    process = jvm_process()
    return process.pid if process is not None else None


def stop_spark(spark, jvm) -> None:
    """Stop the session and its JVM; if the JVM does not go cleanly (e.g. after Ctrl-C), kill it."""
    from pyspark_ledger.spark.session import stop_spark_session

    try:
        stop_spark_session(spark)
    finally:
        _kill_jvm(jvm)


def _kill_jvm(jvm) -> None:
    if jvm is not None and jvm.poll() is None:
        jvm.kill()
        jvm.wait(timeout=JVM_KILL_WAIT_S)


def start_write(spark, settings: WriteSettings):
    """Start the streaming query that writes generated events into the stream."""
    from pyspark_ledger.demo.event_source import DemoEventSource, NAME

    with _spark_errors("starting the streaming write"):
        spark.dataSource.register(DemoEventSource)
        events = (spark.readStream.format(NAME)
                  .option("rowsPerBatch", settings.rows_per_batch)
                  .option("partitions", settings.partitions)
                  .option("stopFile", settings.stop_file)
                  .load())
        return (events.writeStream.format("ledger").queryName("ledger_demo_write")
                .option("metadataServiceUri", settings.metadata_uri)
                .option("stream", settings.stream)
                .option("writerId", settings.writer_id)
                .option("checkpointLocation", settings.checkpoint)
                .option("rowsPerEntry", settings.rows_per_entry)
                .option("partitions", settings.partitions)
                .option("ensembleSize", 3).option("writeQuorum", 3).option("ackQuorum", 2)
                .option("minAckQuorumZones", settings.min_ack_quorum_zones)
                .start())


class RestartingWrite:
    """The streaming write, restarted from its checkpoint (at most ``WRITE_RESTARTS`` times) when it failed only
    because a driver-side Python worker did not connect back in time; the sink's commits are keyed by
    (writer id, batch id), so a batch the restart replays changes nothing. Otherwise it is the query itself."""

    def __init__(self, spark, settings: WriteSettings, on_restart: Callable[[str], None]) -> None:
        self._spark, self._settings, self._on_restart = spark, settings, on_restart
        self.restarts = 0
        self.query = start_write(spark, settings)

    def exception(self):
        error = self.query.exception()
        if error is not None and WORKER_DID_NOT_START in str(error) and self.restarts < WRITE_RESTARTS:
            self.restarts += 1
            self._on_restart(f"Spark's Python worker did not connect back in time (a loaded machine): restarting the "
                             f"streaming write from its checkpoint ({self.restarts} of at most {WRITE_RESTARTS})")
            self.query = start_write(self._spark, self._settings)
            return None
        return error

    def __getattr__(self, name: str):
        return getattr(self.query, name)


@contextmanager
def _spark_errors(doing: str) -> Iterator[None]:
    """Spark's and py4j's exceptions (never KeyboardInterrupt) become LedgerError naming the step."""
    try:
        yield
    except LedgerError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyspark raises many kinds; the message is what matters
        raise LedgerError(f"{doing} failed: {_first_lines(str(exc) or repr(exc))}") from exc


def check_failed(query) -> None:
    """Raise LedgerError with Spark's message if the query died."""
    with _spark_errors("watching the streaming write"):
        error = query.exception()
    if error is not None:
        raise LedgerError(f"the streaming write failed: {_first_lines(str(error))}")


def finish_write(query, stop_file: str, timeout_s: float, on_wait: Callable[[], None]) -> None:
    """Let the query finish its current batch, then stop it (see the module docstring)."""
    Path(stop_file).touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check_failed(query)
        status = query.status
        if not query.isActive or (status["message"] == WAITING_FOR_DATA and not status["isDataAvailable"]):
            query.stop()
            return
        on_wait()
        time.sleep(POLL_S)
    query.stop()
    raise LedgerError(f"the streaming write did not finish its micro-batch within {timeout_s:.0f} s of being "
                      "asked to stop; it was stopped mid-batch (its uncommitted ledgers are not part of the stream)")


def emitted_rows(checkpoint: str, batch_id: int | None) -> int:
    """Events emitted up to the end of ``batch_id`` (0 for None), from ``<checkpoint>/offsets/<batch_id>``."""
    if batch_id is None:
        return 0
    path = Path(checkpoint) / "offsets" / str(batch_id)
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return int(json.loads(lines[-1])["next_id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise LedgerError(f"cannot tell which events batch {batch_id} held: {path} is unreadable ({exc})") from exc


def read_back(spark, metadata_uri: str, stream: str, checkpoint: str,
              on_rows: Callable[[int, object, object], None], on_wait: Callable[[], None]) -> None:
    """Read the whole stream once (availableNow) and hand each micro-batch's checked rows to ``on_rows``."""
    from pyspark.sql import functions as F

    from pyspark_ledger.demo.events import intact_column

    def each_batch(frame, batch_id: int) -> None:
        table = frame.toArrow()
        on_rows(batch_id, table.column("event_id").to_numpy(), table.column("intact").to_numpy())

    with _spark_errors("reading the stream back"):
        rows = (spark.readStream.format("ledger")
                .option("metadataServiceUri", metadata_uri)
                .option("stream", stream)
                .option("maxBytesPerTrigger", READ_BYTES_PER_TRIGGER)
                .load()
                .select(F.col("event_id"), intact_column().alias("intact")))
        query = (rows.writeStream.queryName("ledger_demo_read").foreachBatch(each_batch)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            while not query.awaitTermination(AWAIT_S):
                on_wait()
        finally:
            if query.isActive:
                query.stop()


def _first_lines(text: str, count: int = 6) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:count]) + ("\n..." if len(lines) > count else "")
