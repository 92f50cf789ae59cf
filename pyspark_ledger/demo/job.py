"""One ``ledger demo`` run, from an empty machine to a verdict, leaving no process behind.

``run_demo(config, reporter)``:

1. starts a sandbox (SQLite metadata, ``config.bookies`` >= 4 bookie processes), or with
   ``config.cluster_file`` checks that file and uses its cluster (``cluster_target``);
2. starts a local Spark session (its log in a file);
3. streams generated events into a new stream for ``config.duration_s``,
   printing progress, and kills one bookie part-way while a ledger is being
   written (``bookie_killer``); then lets the current micro-batch finish;
4. reads the stream back with readStream (availableNow) and checks every row
   against what the sink committed (``verify``);
5. reads the stream's ledgers, fragments and ensemble changes (``stream_layout``)
   and returns a ``DemoSummary``.

Everything started is stopped on every path — success, failure, Ctrl-C — in
reverse order (queries, Spark and its JVM, clients, bookies). A temporary work
dir is removed after a successful run; after a failure it is kept for its
Spark log, and the summary or the error says where it is.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pyspark_ledger.demo import spark_runs
from pyspark_ledger.demo.interrupts import StopSignals
from pyspark_ledger.demo.stream_layout import inspect_stream
from pyspark_ledger.demo.summary import DemoSummary
from pyspark_ledger.demo.verify import Tally
from pyspark_ledger.demo.write_phase import WritePhase
from pyspark_ledger.errors import InvalidConfigurationError, LedgerError

log = logging.getLogger(__name__)
MIN_BOOKIES = 4
ACK_QUORUM = 2  # the demo writes ledgers of E=3, Qw=3, Qa=2
READ_PROGRESS_EVERY_S = 5.0
READ_ATTEMPTS = 3
WHY_FOUR = ("4 bookies for ledgers of 3 (E=3, Qw=3, Qa=2): when one is killed, a spare takes its place; "
            "with only 3, writes would fail with not-enough-bookies.")


@dataclass(frozen=True)
class DemoConfig:
    duration_s: float = 60.0
    bookies: int = MIN_BOOKIES
    data_dir: str | None = None
    kill: bool = True
    rows_per_batch: int = 400_000
    rows_per_entry: int = 500
    partitions: int = 2
    cluster_file: str | None = None   # run against this cluster (cluster_target), not a sandbox
    min_ack_quorum_zones: int = 1     # the write's minAckQuorumZones option (at most ACK_QUORUM)

    def check(self) -> "DemoConfig":
        if self.bookies < MIN_BOOKIES:
            raise InvalidConfigurationError(f"--bookies {self.bookies} is too few: {WHY_FOUR}")
        if self.cluster_file and self.data_dir:
            raise InvalidConfigurationError("--data-dir and --cluster exclude each other: with --cluster the "
                                            "bookies and the metadata belong to the cluster")
        if not 1_000 <= self.rows_per_batch <= 10_000_000:
            raise InvalidConfigurationError(f"--rows-per-batch {self.rows_per_batch} is out of range: give 1000 to "
                                            "10000000 rows")
        if not isinstance(self.min_ack_quorum_zones, int) or not 1 <= self.min_ack_quorum_zones <= ACK_QUORUM:
            raise InvalidConfigurationError(
                f"--min-ack-quorum-zones {self.min_ack_quorum_zones} is out of range: the demo's ledgers have an ack "
                f"quorum of {ACK_QUORUM} (E=3, Qw=3, Qa=2), which spans at most {ACK_QUORUM} zones; give 1 or 2 "
                "(2 needs bookies in 3 zones: docs/protocol.md P2)")
        if not 5 <= self.duration_s <= 3600:
            raise InvalidConfigurationError(f"--duration {self.duration_s:g} is out of range: give 5 to 3600 "
                                            "seconds of streaming")
        return self


def run_demo(config: DemoConfig, reporter, stop: StopSignals | None = None) -> DemoSummary:
    """Run the whole demo (see the module docstring).

    ``stop`` (installed by the caller) turns Ctrl-C/SIGTERM into a KeyboardInterrupt at the next safe
    point; everything started is stopped either way.
    """
    config.check()
    stop = stop or StopSignals()
    started = time.monotonic()
    with ExitStack() as cleanup:
        target = _cluster_target(config, reporter) if config.cluster_file else None  # checked before anything
        temporary = None if config.data_dir else _temporary_work_dir(reporter, cleanup, own_sandbox=target is None)
        try:
            sandbox = target or _start_sandbox(config, reporter, cleanup)
            work = temporary or _kept_work_dir(sandbox)
            stop.check()
            spark = _start_spark(work.path, reporter, cleanup, stop, work.temporary,
                                 getattr(sandbox, "spark_conf", None))
            streams = _stream_client(sandbox.metadata_uri, cleanup)
            stream = "events-" + time.strftime("%Y%m%d-%H%M%S")
            phase = WritePhase(config, sandbox, spark, streams, stream, work.path, reporter, cleanup, stop)
            phase.run()
            expected = spark_runs.emitted_rows(phase.checkpoint, phase.last_batch)
            tally, read_s = _read_back(spark, sandbox.metadata_uri, stream, work.path, expected, reporter, stop)
            lost = [phase.kill.bookie_id] if phase.kill else []
            seen = [phase.kill.seen_fragment] if phase.kill and phase.kill.seen_fragment else []
            summary = _summary(sandbox, phase, inspect_stream(streams, stream, lost, seen), tally, read_s,
                               time.monotonic() - started, work)
        except KeyboardInterrupt:
            if temporary is not None:
                temporary.keep = False  # the user asked to stop, not to investigate
            raise
        work.keep = not summary.passed
        return summary


def _summary(sandbox, phase: WritePhase, layout, tally: Tally, read_s: float, elapsed_s: float,
             work: "WorkDir") -> DemoSummary:
    verdict = tally.verdict()
    steady_rows, steady_s = phase.after_first_batch()
    bookies = sandbox.bookies
    return DemoSummary(
        cluster_file=phase.config.cluster_file, min_ack_quorum_zones=phase.config.min_ack_quorum_zones,
        verdict=verdict, layout=layout, micro_batches=0 if phase.last_batch is None else phase.last_batch + 1,
        write_s=phase.write_s, read_s=read_s, elapsed_s=elapsed_s, kill=phase.kill, kill_note=phase.kill_note,
        bookies=len(bookies), bookies_alive=sum(bookie.is_running() for bookie in bookies),
        bookie_names={bookie.bookie_id: f"bookie {index}" for index, bookie in enumerate(bookies)},
        metadata_uri=sandbox.metadata_uri, data_dir=None if work.temporary else str(sandbox.data_dir),
        spark_log=str(work.path / "spark.log") if not work.temporary or not verdict.passed else None,
        repair_key_file=None if work.temporary or sandbox.repair_key_file is None else str(sandbox.repair_key_file),
        pids={"bookies": [bookie.pid for bookie in bookies], "spark_jvm": spark_runs.jvm_pid()},
        warmup_s=phase.warmup_s, steady_rows=steady_rows, steady_s=steady_s)


def _start_sandbox(config: DemoConfig, reporter, cleanup: ExitStack):
    from pyspark_ledger.sandbox import Sandbox

    where = config.data_dir or "a temporary dir"
    ignored = _drop_client_tls_env()
    if ignored:
        reporter.say(f"ignoring {', '.join(ignored)}: the demo's own sandbox speaks plaintext on 127.0.0.1")
    reporter.say(f"starting a sandbox: {config.bookies} bookie processes and the metadata store in {where}")
    reporter.say(f"  ({WHY_FOUR})")
    sandbox = Sandbox(config.bookies, config.data_dir, announce=lambda line: reporter.say("  " + line))
    cleanup.callback(_quietly, "stopping the sandbox", sandbox.stop)
    sandbox.start()
    reporter.say(f"  metadataServiceUri = {sandbox.metadata_uri}")
    return sandbox


def _cluster_target(config: DemoConfig, reporter):
    from pyspark_ledger.demo.cluster_target import load_target

    target = load_target(config.cluster_file)
    reporter.say(f"using the cluster of {config.cluster_file}: {len(target.bookies)} bookies, Spark master "
                 f"{target.spark_conf['spark.master']}, this driver at {target.spark_conf['spark.driver.host']}")
    reporter.say(f"  metadataServiceUri = {target.metadata_uri}")
    return target


def _drop_client_tls_env() -> list[str]:
    """Remove LEDGER_TLS_* from this process's environment (and so from Spark's workers it starts): clients
    take TLS settings from there by default, and the demo's sandbox is plaintext."""
    from pyspark_ledger.security.tls import ENV_CA, ENV_CERT, ENV_KEY

    return [name for name in (ENV_CA, ENV_CERT, ENV_KEY) if os.environ.pop(name, None)]


@dataclass
class WorkDir:
    """Where the demo keeps Spark's log and checkpoints; a temporary one is removed unless ``keep``."""

    path: Path
    temporary: bool
    keep: bool = True


def _temporary_work_dir(reporter, cleanup: ExitStack, own_sandbox: bool = True) -> WorkDir:
    """Made first, so that it is removed last, once Spark and the bookies are down."""
    work = WorkDir(Path(tempfile.mkdtemp(prefix="ledger-demo-")), temporary=True)
    cleanup.callback(_remove_unless_kept, work, reporter, own_sandbox)
    return work


def _kept_work_dir(sandbox) -> WorkDir:
    work = WorkDir(Path(sandbox.data_dir) / "demo", temporary=False)
    work.path.mkdir(exist_ok=True)
    return work


def _remove_unless_kept(work: WorkDir, reporter, own_sandbox: bool = True) -> None:
    """Says what went: with ``own_sandbox`` the demo's sandbox went too; a cluster of ``--cluster`` stays."""
    if work.keep:
        reporter.say(f"kept {work.path} for inspection (Spark's log: {work.path / 'spark.log'})")
    else:
        shutil.rmtree(work.path, ignore_errors=True)
        reporter.say(f"removed the temporary {work.path} (Spark's log and checkpoints)"
                     + (" and the sandbox" if own_sandbox else "; the cluster keeps running"))


def _start_spark(work: Path, reporter, cleanup: ExitStack, stop: StopSignals, temporary: bool = False,
                 cluster_conf: dict | None = None):
    log_path = work / "spark.log"
    removed = " (a temporary dir, removed at exit unless the check fails)" if temporary else ""
    where = f"on the cluster {cluster_conf['spark.master']}" if cluster_conf else "in local mode (2 cores)"
    reporter.say(f"starting Spark {where}; its log goes to {log_path}{removed}")
    spark = spark_runs.start_spark(log_path, conf=cluster_conf)
    cleanup.callback(_quietly, "stopping Spark", spark_runs.stop_spark, spark, spark_runs.jvm_process())
    stop.install()  # pyspark replaced the SIGINT handler with its own
    stop.check()
    return spark


def _stream_client(metadata_uri: str, cleanup: ExitStack):
    from pyspark_ledger.log import StreamClient

    streams = StreamClient(metadata_uri)
    cleanup.callback(_quietly, "closing the stream client", streams.close)
    return streams


def _read_back(spark, metadata_uri: str, stream: str, work: Path, expected: int, reporter,
               stop: StopSignals) -> tuple[Tally, float]:
    """Read the stream back; again (from scratch, bounded) when Spark's Python worker for the source did not
    start in time: on a loaded machine its start can exceed Spark's fixed wait for it to connect back."""
    for attempt in range(1, READ_ATTEMPTS):
        try:
            return _read_back_once(spark, metadata_uri, stream, work, expected, reporter, stop)
        except LedgerError as exc:
            if spark_runs.WORKER_DID_NOT_START not in str(exc):
                raise
            reporter.say(f"Spark's Python worker did not connect back in time (a loaded machine); reading again "
                         f"(attempt {attempt + 1} of {READ_ATTEMPTS})")
    return _read_back_once(spark, metadata_uri, stream, work, expected, reporter, stop)


def _read_back_once(spark, metadata_uri: str, stream: str, work: Path, expected: int, reporter,
                    stop: StopSignals) -> tuple[Tally, float]:
    reporter.say(f"reading stream {stream!r} back with readStream (trigger availableNow) and checking every row "
                 f"against the {expected:,} events the sink committed")
    tally = Tally(expected)
    started = time.monotonic()
    said = [started]

    def on_rows(batch_id: int, ids, intact) -> None:
        tally.add(ids, intact)
        now = time.monotonic()
        if now - said[0] >= READ_PROGRESS_EVERY_S or tally.rows_read >= expected:
            said[0] = now
            reporter.say(f"[{now - started:6.1f}s] read {tally.rows_read:,} of {expected:,} rows "
                         f"({batch_id + 1} micro-batches)")

    checkpoint = str(work / "read-checkpoint" / uuid.uuid4().hex)
    spark_runs.read_back(spark, metadata_uri, stream, checkpoint, on_rows, on_wait=stop.check)
    return tally, time.monotonic() - started


def _quietly(what: str, action: Callable, *args) -> None:
    """Run a cleanup step; a failure is logged, never raised, so the next steps still run."""
    try:
        action(*args)
    except Exception as exc:  # noqa: BLE001 - cleanup must go on; the run's own error matters more
        log.warning("ledger demo: %s failed: %s", what, str(exc).splitlines()[0] if str(exc) else repr(exc))
