"""The streaming part of the demo: warm up, write events for a while, kill a bookie part-way, stop cleanly.

``WritePhase.run()`` starts the streaming write (``spark_runs.start_write``)
and waits for its first ledger: Spark's first micro-batch starts the Python
workers of the source and the sink, which takes seconds on an idle machine
and a minute on a busy one (``warmup_s``). From the first write on it streams
for ``duration_s``, printing a progress line every few seconds (rows and
micro-batches committed, rows/s, bookies alive); after ``KILL_AT`` of the
duration it pauses a bookie and kills it once a ledger begun during the pause
proves that a writer has adds it has not acknowledged (``bookie_killer``).
When the time is up the source plans no new batch; the batch in flight
commits (the kill may still land in it; a bookie still paused then is killed
without proof) and the query is stopped (``spark_runs.finish_write``).
Afterwards ``last_batch`` is the writer's last committed batch according to
the stream's own record (the log layer), not Spark's, and ``write_s`` the
seconds from the first write to the stop.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from pyspark_ledger.demo import spark_runs
from pyspark_ledger.demo.bookie_killer import BookieKiller, Kill
from pyspark_ledger.demo.interrupts import StopSignals
from pyspark_ledger.demo.report import kill_line, progress_line
from pyspark_ledger.errors import LedgerError, NoSuchLedgerError
from pyspark_ledger.log.ledgers import STREAM_TAG

KILL_AT = 0.4  # of the duration
POLL_S = 0.2
PROGRESS_EVERY_S = 5.0
SPARK_PROGRESS_EVERY_S = 1.0
WARMUP_TIMEOUT_S = 420.0
MIN_FINISH_TIMEOUT_S = 180.0


class WritePhase:
    """One streaming write with its bookie kill (see the module docstring)."""

    def __init__(self, config, sandbox, spark, streams, stream: str, work: Path, reporter,
                 cleanup: ExitStack, stop: StopSignals) -> None:
        self.config, self.sandbox, self.spark, self.streams = config, sandbox, spark, streams
        self.stream, self.reporter, self.cleanup, self.stop = stream, reporter, cleanup, stop
        self.checkpoint = str(work / "write-checkpoint" / stream)
        self.stop_file = str(work / f"{stream}.stop")
        self.writer_id = f"ledger-demo-{stream}"
        self.kill: Kill | None = None
        self.kill_note = "" if config.kill else "none (--no-kill)"
        self.last_batch: int | None = None
        self.warmup_s = self.write_s = 0.0
        self.batches: dict[int, tuple[int, int]] = {}  # Spark's progress: batch id -> (rows, milliseconds)
        self._started = self._writing_since = 0.0
        self._next_line = self._next_progress = 0.0
        self._other_ledgers: set[int] = set()

    def run(self) -> None:
        config = self.config
        self.reporter.say(
            f"streaming generated events into stream {self.stream!r} for {config.duration_s:g} s: "
            f"{config.rows_per_batch:,} rows per micro-batch in {config.partitions} tasks, each writing a new "
            f"ledger of {config.rows_per_entry:,}-row entries")
        query = spark_runs.RestartingWrite(self.spark, self._settings(), self.reporter.say)
        self.cleanup.callback(_stop_if_active, query)
        self.stop.check()
        self._started = time.monotonic()
        self._next_line = self._started + PROGRESS_EVERY_S
        self._warm_up(query)
        killer = self._killer()
        self._stream(query, killer)
        self.reporter.say(f"[{self._elapsed():6.1f}s] time is up: the source plans no new micro-batch; waiting for "
                          "the one in flight to commit")
        spark_runs.finish_write(query, self.stop_file, max(MIN_FINISH_TIMEOUT_S, 2 * config.duration_s),
                                on_wait=lambda: self._tick(query, killer))
        if killer is not None and self.kill is None:
            self._report_kill(killer.finish(self._elapsed()))
        self.write_s = time.monotonic() - self._writing_since
        self._record_progress(query)
        self.reporter.say(self._progress_text("stopped"))
        self.last_batch = self.streams.last_committed_batch(self.stream, self.writer_id)
        if config.kill and self.kill is None:
            self.kill_note = "none: no ledger of the stream was being written after the kill time, so no bookie " \
                             "was killed"

    def _settings(self) -> spark_runs.WriteSettings:
        config = self.config
        return spark_runs.WriteSettings(
            metadata_uri=self.sandbox.metadata_uri, stream=self.stream, writer_id=self.writer_id,
            checkpoint=self.checkpoint, stop_file=self.stop_file, rows_per_batch=config.rows_per_batch,
            rows_per_entry=config.rows_per_entry, partitions=config.partitions,
            min_ack_quorum_zones=config.min_ack_quorum_zones)

    def _warm_up(self, query) -> None:
        """Wait (bounded) for the first ledger of the stream: Spark's workers are up and writing."""
        deadline = self._started + WARMUP_TIMEOUT_S
        while not self._stream_has_ledger():
            self.stop.check()
            spark_runs.check_failed(query)
            if time.monotonic() >= deadline:
                raise LedgerError(f"Spark's first micro-batch wrote nothing within {WARMUP_TIMEOUT_S:.0f} s of the "
                                  "query's start; its log (see above) says why")
            if time.monotonic() >= self._next_line:
                self.reporter.say(f"[{self._elapsed():6.1f}s] warming up: Spark is starting the Python workers of "
                                  "the first micro-batch")
                self._next_line += PROGRESS_EVERY_S
            time.sleep(POLL_S)
        self.warmup_s = self._elapsed()
        self._writing_since = time.monotonic()
        kill = f"; one bookie gets kill -9 in ~{self.config.duration_s * KILL_AT:.0f} s" if self.config.kill else ""
        self.reporter.say(f"[{self.warmup_s:6.1f}s] the first micro-batch is writing: streaming for "
                          f"{self.config.duration_s:g} s from now{kill}")

    def _stream_has_ledger(self) -> bool:
        client = self.streams.client
        for ledger_id in client.list_ledgers():
            if ledger_id in self._other_ledgers:
                continue
            try:
                if client.ledger_metadata(ledger_id).custom_metadata.get(STREAM_TAG) == self.stream.encode():
                    return True
            except NoSuchLedgerError:
                pass
            self._other_ledgers.add(ledger_id)
        return False

    def _killer(self) -> BookieKiller | None:
        if not self.config.kill:
            return None
        killer = BookieKiller(self.sandbox, self.streams.client, self.stream)
        self.cleanup.callback(killer.release)  # a paused bookie is continued if the demo stops early
        return killer

    def _stream(self, query, killer: BookieKiller | None) -> None:
        deadline = self._writing_since + self.config.duration_s
        while time.monotonic() < deadline:
            spark_runs.check_failed(query)
            self._tick(query, killer)
            if killer is None or not killer.paused:  # a paused victim's proof is polled for by the killer itself
                time.sleep(POLL_S)

    def _tick(self, query, killer: BookieKiller | None) -> None:
        """Kill when due, report bookies that died on their own, refresh Spark's progress, print when due."""
        self.stop.check()
        writing_s = time.monotonic() - self._writing_since
        if killer is not None and self.kill is None and writing_s >= self.config.duration_s * KILL_AT:
            self._report_kill(killer.step(self._elapsed()))
        for index, bookie in self.sandbox.poll_exits():
            self.reporter.say(f"[{self._elapsed():6.1f}s] bookie {index} ({bookie.bookie_id}) exited on its own "
                              f"with status {bookie.returncode}; its log: {bookie.data_dir / 'bookie-stderr.log'}"
                              + ("" if self.config.data_dir else " (removed at exit; --data-dir keeps it)"))
        now = time.monotonic()
        if now >= self._next_progress:
            self._record_progress(query)
            self._next_progress = now + SPARK_PROGRESS_EVERY_S
        if now >= self._next_line:
            self.reporter.say(self._progress_text())
            self._next_line = now + PROGRESS_EVERY_S

    def _report_kill(self, kill: Kill | None) -> None:
        if kill is not None:
            self.kill = kill
            self.reporter.say(kill_line(kill, f"bookie {kill.bookie_index}"))

    def _record_progress(self, query) -> None:
        for progress in query.recentProgress:
            if progress.numInputRows:
                duration_ms = (progress.durationMs or {}).get("triggerExecution", 0)
                self.batches[progress.batchId] = (progress.numInputRows, duration_ms)

    def after_first_batch(self) -> tuple[int, float]:
        """Rows and seconds of the micro-batches after the first (which pays for Spark's warm-up)."""
        later = [rows_ms for _, rows_ms in sorted(self.batches.items())[1:]]
        return sum(rows for rows, _ in later), sum(ms for _, ms in later) / 1000

    def _progress_text(self, note: str = "") -> str:
        alive = sum(bookie.is_running() for bookie in self.sandbox.bookies)
        rows = sum(rows for rows, _ in self.batches.values())
        return progress_line(self._elapsed(), time.monotonic() - self._writing_since, rows, len(self.batches), alive,
                             len(self.sandbox.bookies), note)

    def _elapsed(self) -> float:
        return time.monotonic() - self._started


def _stop_if_active(query) -> None:
    try:
        if query.isActive:
            query.stop()
    except Exception:  # noqa: BLE001 - the JVM may be gone already (Ctrl-C reaches it too)
        pass
