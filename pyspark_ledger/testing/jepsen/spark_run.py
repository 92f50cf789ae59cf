"""A Spark Structured Streaming job under faults, checked exactly once (issue 17 part 5, docs/jepsen.md; docs/protocol.md S1).

``run(SparkRunConfig(seed=...), base_dir, spark)`` starts a ``LocalFaultCluster`` whose bookies register
their proxies' addresses (``advertise_proxies``: Spark's Python workers open the metadata store from the
``metadataServiceUri`` option themselves, so the addressing has to be in the metadata), and a streaming
query in the given local-mode session: a deterministic source (``id_source``: ids ``0, 1, 2, ...``,
``rowsPerBatch`` per micro-batch, the same rows when a batch is replayed) written into a ``ledger`` stream
with a checkpoint. Meanwhile a seeded schedule (``faults.schedule.generate``) kills, partitions, pauses and
resets bookies. A query that fails is restarted from its checkpoint, as a user would (at most
``max_restarts`` times). After healing, the query must commit a new batch within ``PROGRESS_TIMEOUT_S``
(otherwise a note fails the run); then the source is told to stop, the query finishes its batch, and the
whole stream is read back with a batch read: every id the committed batches emitted must be there exactly
once, nothing else (``checker.check_exactly_once``). With ``metadata="zookeeper"`` the metadata is in a real
ZooKeeper server and the schedule also draws ``ZK_KINDS``: the server paused, killed and restarted, and the
job's sessions expired. The job reaches ZooKeeper through a ``FaultProxy`` of its own (the bookies dial the
server directly), so ``zk-expiry`` cuts the job -- the driver's and Spark's Python workers' clients -- from
ZooKeeper for longer than its session timeout: the server expires their sessions, and the job has to notice
on reconnecting. Returns a ``SparkRunOutcome`` with the failures and
the figures, in the JSON shape of the other runs (``figures.run_figures``) plus ``duplicated`` and
``restarts``. ``SparkRun`` is the run itself, against any fault cluster: the namespace cluster's variant
(``cluster/spark_fault_run.py``, Spark standalone) gives it the cluster, the session, a schedule of its own
(``SparkRunConfig.schedule``) and the fault kinds only it knows (``extra_faults``).
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_ledger.errors import InvalidArgumentError, LedgerError
from pyspark_ledger.testing.faults import actions, schedule as sched
from pyspark_ledger.testing.faults.play import play
from pyspark_ledger.testing.faults.local_cluster import ZK_SESSION_S, LocalFaultCluster
from pyspark_ledger.testing.faults.proxy import FaultProxy
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.checker import Failure, check_exactly_once
from pyspark_ledger.testing.jepsen.history import History

STREAM = "jepsen-spark"
WRITER_ID = "jepsen-spark-writer"
KINDS = (sched.KILL, sched.PARTITION, sched.PAUSE, sched.RESET)
ZK_KINDS = KINDS + sched.ZK_KINDS
METADATA = ("sqlite", "zookeeper", "netns")   # netns: the namespace cluster (cluster/spark_fault_run.py)
DRIVER_CRASH = "driver-crash"
DRIVER = "spark-driver"
MAX_DRIVER_CRASHES = 20
CRASH_WAIT_S = 10.0
MAX_RESTARTS = 20
MAX_ROWS_PER_BATCH = 100_000
SETTLE_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 90.0
WARMUP_TIMEOUT_S = 90.0
PROGRESS_TIMEOUT_S = 60.0
MAX_WAIT_S = 900.0
POLL_S = 0.2
# The job's sessions: the longest the test server grants (20 ticks of 200 ms). With the cluster's 2 s, a Python
# worker busy with a batch on a loaded machine (load 16-20 on 2 cores) missed its pings (kazoo waits 2/3 of the
# timeout for a ping's answer) and lost its connection every few seconds with no fault at all.
JOB_SESSION_S = 4
EXPIRY_CUT_S = JOB_SESSION_S + 2.0   # the server expires a session after its timeout with no heartbeat


@dataclass(frozen=True)
class SparkRunConfig:
    seed: int
    duration_s: float = 12.0
    steps: int = 5
    kinds: tuple[str, ...] = KINDS
    rows_per_batch: int = 50
    partitions: int = 2
    trigger_s: float = 0.5
    max_restarts: int = 6
    driver_crashes: int = 1
    metadata: str = "sqlite"
    schedule: tuple = ()     # steps to play instead of the ones generate() draws from the seed and kinds
    warmup_timeout_s: float = WARMUP_TIMEOUT_S
    progress_timeout_s: float = PROGRESS_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.metadata not in METADATA:
            raise InvalidArgumentError(f"metadata must be one of {', '.join(METADATA)}, got {self.metadata!r}")
        if not (0 < self.warmup_timeout_s <= MAX_WAIT_S and 0 < self.progress_timeout_s <= MAX_WAIT_S):
            raise InvalidArgumentError(f"warmup_timeout_s and progress_timeout_s must be in (0, {MAX_WAIT_S:g}] s, got "
                                       f"{self.warmup_timeout_s} and {self.progress_timeout_s}")
        if self.metadata == "sqlite" and set(self.kinds) & set(sched.ZK_KINDS):
            raise InvalidArgumentError(f"kinds {sorted(set(self.kinds) & set(sched.ZK_KINDS))} need metadata='zookeeper'")
        if not 1 <= self.rows_per_batch <= MAX_ROWS_PER_BATCH:
            raise InvalidArgumentError(f"rows_per_batch must be in 1..{MAX_ROWS_PER_BATCH}, got {self.rows_per_batch}")
        if not 0 <= self.max_restarts <= MAX_RESTARTS:
            raise InvalidArgumentError(f"max_restarts must be in 0..{MAX_RESTARTS}, got {self.max_restarts}")
        if not 0 <= self.driver_crashes <= MAX_DRIVER_CRASHES:
            raise InvalidArgumentError(f"driver_crashes must be in 0..{MAX_DRIVER_CRASHES}, got {self.driver_crashes}")


@dataclass
class SparkRunOutcome:
    config: SparkRunConfig
    failures: list[Failure]
    steps: list
    figures: dict
    notes: list[str] = field(default_factory=list)
    history: History | None = None    # one "add" per committed batch (entry_id: the batch), for a failure's report

    @property
    def ok(self) -> bool:
        return not self.failures and not self.notes


@dataclass(frozen=True)
class _Exactly:
    """What ``figures.run_figures`` takes from a checker result."""

    failures: list
    acknowledged: int
    lost: int
    duplicated: int

    @property
    def ok(self) -> bool:
        return not self.failures

    def figures(self) -> dict:
        return {"acknowledged": self.acknowledged, "lost": self.lost, "divergent": 0, "duplicated": self.duplicated,
                "ledgers": 0, "failures": len(self.failures)}


def run(config: SparkRunConfig, base_dir: str | Path, spark) -> SparkRunOutcome:
    if config.metadata not in ("sqlite", "zookeeper"):
        raise InvalidArgumentError(f"run() starts a local cluster (sqlite or zookeeper), not {config.metadata!r}: "
                                   "the namespace cluster's run is pyspark_ledger.testing.cluster.spark_fault_run")
    base_dir = Path(base_dir)
    started = time.monotonic()
    with LocalFaultCluster(base_dir / "cluster", 5, config.metadata, seed=config.seed,
                           advertise_proxies=True) as cluster:
        job_proxy = None
        uri = cluster.metadata_uri
        if config.metadata == "zookeeper":   # the job's own way to ZooKeeper, which zk-expiry cuts
            job_proxy = FaultProxy(cluster.zookeeper.connect_string, seed=config.seed)
            uri = _job_uri(uri, cluster.zookeeper.connect_string, job_proxy.address)
        try:
            return SparkRun(config, cluster, base_dir, spark, started, uri, job_proxy).go()
        finally:
            from pyspark_ledger.spark import executor

            executor.close_all(uri)
            if job_proxy is not None:
                job_proxy.close()


class SparkRun:
    """One run of the job against ``cluster`` (a ``LocalFaultCluster`` or the namespace cluster's
    ``NetnsFaultCluster``: ``hosts``, ``network``, ``heal_all``, ``open_store``, ``addresses``) through ``uri``.
    ``extra_faults`` (kind -> ``apply(step)`` returning its heal) plays fault kinds ``actions.apply`` does not
    know, e.g. the namespace cluster's executor kill."""

    def __init__(self, config: SparkRunConfig, cluster, base_dir: Path, spark, started: float, uri: str,
                 job_proxy: FaultProxy | None = None, extra_faults=None) -> None:
        self.config, self.cluster, self.base_dir, self.spark, self.started = config, cluster, base_dir, spark, started
        self.uri, self.job_proxy, self.extra_faults = uri, job_proxy, dict(extra_faults or {})
        self.checkpoint = str(base_dir / "checkpoint")
        self.stop_file = str(base_dir / "stop")
        self.log = actions.FaultLog()
        self.history = History(prefix="spark-")   # one "batch" event per micro-batch the query committed
        self.notes: list[str] = []
        self.restarts: list[str] = []
        self.query = None
        self._seen_batches: set[int] = set()
        self.phases: dict[str, float] = {}
        self.replayed: list[int | None] = []
        self._phase_began = time.monotonic()

    def go(self) -> SparkRunOutcome:
        config = self.config
        steps = list(config.schedule) or sched.generate(config.seed, self.cluster.roles(), duration_s=config.duration_s,
                                                        steps=config.steps, kinds=config.kinds)
        rng = random.Random(config.seed * 7919 + 1)
        crashes = sorted(sched.Step(round(rng.uniform(0.1, 0.9) * config.duration_s, 2), DRIVER_CRASH, DRIVER, 0.0)
                         for _ in range(config.driver_crashes))
        steps = sorted(steps + crashes, key=lambda step: step.at_s)
        try:
            self.query = self._start()
            self._warm_up()
            player = threading.Thread(target=self._play, args=([step for step in steps if step.kind != DRIVER_CRASH],),
                                      name="spark-faults", daemon=True)
            begin = time.monotonic()
            player.start()
            while player.is_alive():
                self._restart_if_failed()
                if crashes and time.monotonic() - begin >= crashes[0].at_s:
                    self._crash_driver(crashes.pop(0))
                player.join(POLL_S)
            self._phase("faults")
            self._heal_all()
            self._wait_for_bookies()
            self._phase("healing")
            self._await_progress()
            self._phase("first batch after healing")
            last_batch = self._finish()
            self._phase("finishing")
            expected = [str(i) for i in range(_emitted(self.checkpoint, last_batch))]
            output = self._read_back()
            self._phase("reading")
        finally:
            if self.query is not None and self.query.isActive:
                self.query.stop()
            self._heal_all()
        failures = check_exactly_once(expected, output)
        counts = Counter(output)
        wanted = set(expected)
        result = _Exactly(failures, len(expected), sum(1 for key in wanted if counts[key] == 0),
                          sum(count - 1 for count in counts.values() if count > 1) + sum(
                              count for key, count in counts.items() if key not in wanted))
        numbers = figures.run_figures(config.seed, config.metadata, result, self.log.injected, self.history,
                                      time.monotonic() - self.started, steps)
        numbers.update(notes=list(self.notes), restarts=len(self.restarts), batches=last_batch + 1 if
                       last_batch is not None else 0, restart_reasons=self.restarts[:10], replayed_batches=self.replayed, phases_s=self.phases)
        return SparkRunOutcome(config, failures, steps, numbers, self.notes, self.history)

    # --- the query ------------------------------------------------------------------------
    def _start(self):
        from pyspark_ledger.testing.jepsen.id_source import NAME, IdSource

        self.spark.dataSource.register(IdSource)
        events = (self.spark.readStream.format(NAME).option("rowsPerBatch", self.config.rows_per_batch)
                  .option("partitions", self.config.partitions).option("stopFile", self.stop_file).load())
        return (events.writeStream.format("ledger").queryName("jepsen_spark_write")
                .option("metadataServiceUri", self.uri).option("stream", STREAM)
                .option("writerId", WRITER_ID).option("checkpointLocation", self.checkpoint)
                .option("partitions", self.config.partitions)
                .option("ensembleSize", 3).option("writeQuorum", 3).option("ackQuorum", 2)
                .trigger(processingTime=f"{self.config.trigger_s} seconds").start())

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self._phase_began, 2)
        self._phase_began = now

    def _warm_up(self) -> None:
        """Wait until the query committed its first batch (Spark and its Python workers are up), so the faults
        hit a running query rather than its start."""
        deadline = time.monotonic() + self.config.warmup_timeout_s
        while _last(Path(self.checkpoint) / "commits") is None:
            if time.monotonic() > deadline:
                raise LedgerError(f"the streaming query committed no batch within {self.config.warmup_timeout_s:.0f} s")
            self._restart_if_failed()
            time.sleep(POLL_S)
        self._phase("warm-up")

    def _crash_driver(self, step: sched.Step) -> None:
        """The driver dies right after the sink committed batch N and before Spark recorded it in its commit log:
        the query is stopped (between two batches if one comes within ``CRASH_WAIT_S``), then its commit-log entry
        N is removed, and any batch planned after N (whose rows the source gives again, the same ids) with it. The
        restarted query replays batch N with the same rows, which the sink must make a no-op: docs/protocol.md S1."""
        record = self.log.started(step)
        offsets, commits = Path(self.checkpoint) / "offsets", Path(self.checkpoint) / "commits"
        deadline = time.monotonic() + CRASH_WAIT_S
        while _last(offsets) != _last(commits) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.query.stop()
        newest = _last(commits)
        if newest is not None:
            for directory, first in ((commits, newest), (offsets, newest + 1)):
                for batch in range(first, (_last(directory) or first) + 1):
                    for name in (str(batch), f".{batch}.crc"):
                        (directory / name).unlink(missing_ok=True)
        self.replayed.append(newest)
        self.query = self._start()
        self.log.healed(record)

    def _restart_if_failed(self) -> None:
        """Record the batches the query finished; restart it from its checkpoint if it died (bounded)."""
        for progress in self.query.recentProgress or ():
            batch = progress.get("batchId")
            if batch is not None and batch not in self._seen_batches:
                self._seen_batches.add(batch)
                op = self.history.invoke("query", "add", None)
                self.history.ok(op, entry_id=batch)
        error = self.query.exception()
        if error is None and self.query.isActive:
            return
        reason = str(error).splitlines()[0][:300] if error is not None else "stopped"
        if len(self.restarts) >= self.config.max_restarts:
            raise LedgerError(f"the streaming query failed {len(self.restarts) + 1} times; last: {reason}")
        self.restarts.append(reason)
        time.sleep(1.0)
        self.query = self._start()

    def _await_progress(self) -> None:
        """Once everything healed, the query must commit a new batch (bounded): a query that never recovers after
        ZooKeeper or the bookies heal is a failure even when what it wrote is exactly once."""
        before = _last(Path(self.checkpoint) / "commits")
        deadline = time.monotonic() + self.config.progress_timeout_s
        while time.monotonic() < deadline:
            self._restart_if_failed()
            newest = _last(Path(self.checkpoint) / "commits")
            if newest is not None and (before is None or newest > before):
                return
            time.sleep(POLL_S)
        self.notes.append(f"the query committed no batch within {self.config.progress_timeout_s:.0f} s after healing "
                          f"(last committed: {before})")

    def _finish(self) -> int | None:
        """Stop the source, let the query finish (restarting it if a late failure killed it), stop it; returns
        the last batch its commit log holds."""
        Path(self.stop_file).touch()
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        while time.monotonic() < deadline:
            self._restart_if_failed()
            status = self.query.status
            if not status["isDataAvailable"] and status["message"].startswith("Waiting for"):
                if _last(Path(self.checkpoint) / "offsets") == _last(Path(self.checkpoint) / "commits"):
                    self.query.stop()
                    return _last(Path(self.checkpoint) / "commits")
            time.sleep(POLL_S)
        self.query.stop()
        raise LedgerError(f"the streaming query did not finish within {FINISH_TIMEOUT_S:.0f} s after healing")

    def _read_back(self) -> list[str]:
        frame = (self.spark.read.format("ledger").option("metadataServiceUri", self.uri)
                 .option("stream", STREAM).load().select("id"))
        return [str(value) for value in frame.toArrow().column("id").to_pylist()]

    # --- faults -----------------------------------------------------------------------------
    def _play(self, steps) -> None:
        hooks = {"zk_expiry": self._expire_job_sessions}

        def apply(step):
            if step.kind in self.extra_faults:
                return self.extra_faults[step.kind](step)
            return actions.apply(step, self.cluster.hosts, self.cluster.network, hooks)
        play(steps, apply, self.log, self.config.duration_s)

    def _heal_all(self) -> None:
        self.cluster.heal_all()
        if self.job_proxy is not None:
            self.job_proxy.heal()

    def _expire_job_sessions(self, host):
        return cut_until_expired(self.job_proxy)

    def _wait_for_bookies(self) -> None:
        store = self.cluster.open_store()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if set(self.cluster.addresses) <= set(store.bookies(include_read_only=False)):
                    return
            except LedgerError:
                pass
            time.sleep(0.1)
        self.notes.append(f"not every bookie was writable again within {SETTLE_TIMEOUT_S:.0f} s after healing")


def cut_until_expired(proxy: FaultProxy, cut_s: float = EXPIRY_CUT_S):
    """``zk-expiry`` of the job: its proxy to ZooKeeper refuses and resets every connection, and the returned heal
    lifts that no sooner than ``cut_s`` after the cut (longer than the job's session timeout, however short the
    step), so the server has expired every session that came through the proxy."""
    proxy.block("both")
    proxy.reset_all()
    until = time.monotonic() + cut_s

    def heal() -> None:
        time.sleep(max(0.0, until - time.monotonic()))
        proxy.heal()
    return heal


def _job_uri(uri: str, server: str, proxy: str) -> str:
    """The cluster's URI with the job's proxy for the server and the job's session timeout."""
    job = uri.replace(server, proxy, 1).replace(f"session_timeout={ZK_SESSION_S}", f"session_timeout={JOB_SESSION_S}", 1)
    if proxy not in job or f"session_timeout={JOB_SESSION_S}" not in job:
        raise LedgerError(f"cannot make the job's ZooKeeper URI from {uri!r}")
    return job


def _last(directory: Path) -> int | None:
    ids = [int(path.name) for path in directory.glob("*") if path.name.isdigit()] if directory.is_dir() else []
    return max(ids) if ids else None


def _emitted(checkpoint: str, batch: int | None) -> int:
    from pyspark_ledger.testing.jepsen.id_source import emitted

    return emitted(checkpoint, batch)
