"""One Jepsen-style run: writers append while a seeded fault schedule plays, then heal, recover, read, check.

``run(RunConfig(seed=...), base_dir)`` starts a ``LocalFaultCluster`` (bookies behind fault proxies;
SQLite or ZooKeeper metadata), ``writers`` ``WriterWorker`` threads, and -- with ``process_writer`` -- a
writer subprocess that the ``writer-pause`` fault stops (SIGSTOP) while the runner recovers its ledger and
resumes (SIGCONT): it must then find itself fenced. The schedule (``faults.schedule.generate`` from the
seed) is applied by one driver thread. Afterwards everything is healed, the writers stop, every ledger in
the metadata store is opened with recovery (closing what is still open), two independent readers read
each one back, and ``checker.check`` judges the history. Returns a ``RunOutcome``: the checker's result,
the schedule, the faults injected and the figures (JSON-ready).
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_ledger.client import ClientConfig, LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.bookies import child_env
from pyspark_ledger.testing.faults import actions, schedule as sched
from pyspark_ledger.testing.faults.play import play
from pyspark_ledger.testing.faults.hosts import Host, LocalProcessHost
from pyspark_ledger.testing.faults.local_cluster import LocalFaultCluster
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.checker import LedgerOutcome, Result, check
from pyspark_ledger.testing.jepsen.history import History, digest, path_of
from pyspark_ledger.testing.jepsen.workers import PASSWORD, WriterWorker

RECOVERY_ATTEMPTS = 8
SETTLE_TIMEOUT_S = 60.0
PROCESS_WRITER = "writer-p"
WRITER_PAUSE_S = 2.0
WRITER_ADD_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RunConfig:
    seed: int
    metadata: str = "sqlite"
    bookies: int = 5
    writers: int = 3
    quorums: tuple[int, int, int] = (3, 3, 2)
    duration_s: float = 15.0
    steps: int = 6
    kinds: tuple[str, ...] = sched.BOOKIE_KINDS
    process_writer: bool = False
    entries_per_ledger: int = 150
    add_timeout_s: float = 2.0
    schedule: tuple[sched.Step, ...] | None = None   # these steps instead of ``generate(seed, ...)``

    def client_config(self) -> ClientConfig:
        return ClientConfig(add_timeout_s=self.add_timeout_s, read_timeout_s=self.add_timeout_s,
                            close_timeout_s=10.0, recovery_timeout_s=60.0, placement_seed=self.seed)


@dataclass
class RunOutcome:
    config: RunConfig
    result: Result
    steps: list
    injected: list
    figures: dict
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.notes


def run(config: RunConfig, base_dir: str | Path) -> RunOutcome:
    base_dir = Path(base_dir)
    started = time.monotonic()
    with LocalFaultCluster(base_dir / "cluster", config.bookies, config.metadata, seed=config.seed) as cluster:
        return _Run(config, cluster, base_dir, started).go()


def run_on(config: RunConfig, cluster, base_dir: str | Path) -> RunOutcome:
    """One run on a cluster the caller started and stops: anything with ``hosts`` (name -> Host), ``network``,
    ``addresses`` (bookie id -> address clients dial), ``metadata_uri``, ``open_store()`` and ``heal_all()``
    (the namespace cluster's ``testing.cluster.fault_cluster.NetnsFaultCluster``)."""
    base_dir = Path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    return _Run(config, cluster, base_dir, time.monotonic()).go()


class _Run:
    def __init__(self, config: RunConfig, cluster, base_dir: Path, started: float) -> None:
        self.config, self.cluster, self.base_dir, self.started = config, cluster, base_dir, started
        self.history = History(prefix="main-")
        self.store = cluster.open_store()  # shared by writers and the recoverer: records every version
        self.stop = threading.Event()
        self.log = actions.FaultLog()
        self.notes: list[str] = []
        self.hosts: dict[str, Host] = dict(cluster.hosts)
        self.process = None
        self.writer_recovered: tuple[int, float] | None = None
        self.writer_stop = ""
        self.clients: list[LedgerClient] = []

    def client(self, store=None) -> LedgerClient:
        client = LedgerClient(store or self.store, self.config.client_config())
        self.clients.append(client)
        return client

    def go(self) -> RunOutcome:
        config = self.config
        try:
            if config.process_writer:
                self._start_process_writer()
            roles = {name: host.role for name, host in self.hosts.items()}
            steps = list(config.schedule) if config.schedule is not None else sched.generate(
                config.seed, roles, duration_s=config.duration_s, steps=config.steps, kinds=config.kinds)
            if config.process_writer and not any(step.kind == sched.WRITER_PAUSE for step in steps):
                steps = sorted(steps + [sched.Step(round(config.duration_s * 0.3, 2), sched.WRITER_PAUSE,
                                                   PROCESS_WRITER, WRITER_PAUSE_S)], key=lambda step: step.at_s)
            workers = [WriterWorker(f"w{index}", self.client(), self.history, self.stop, seed=config.seed * 31 + index,
                                    quorums=config.quorums, entries_per_ledger=config.entries_per_ledger,
                                    abandon_at_stop=index % 2 == 1)
                       for index in range(config.writers)]
            for worker in workers:
                worker.start()
            self._play(steps)
            self.cluster.heal_all()
            self._wait_for_bookies()
            self.stop.set()
            for worker in workers:
                worker.join(SETTLE_TIMEOUT_S)
                if worker.is_alive():
                    self.notes.append(f"writer {worker.label} did not stop within {SETTLE_TIMEOUT_S:.0f} s")
                elif worker.error is not None:
                    self.notes.append(f"writer {worker.label} crashed: {worker.error!r}")
            self._finish_process_writer()
            outcomes = self._recover_and_read()
            history = self._merged_history()
            history.save(self.base_dir / "history-all.jsonl")  # kept with a failed run's files
            result = check(history, outcomes)
            seconds = time.monotonic() - self.started
            numbers = figures.run_figures(config.seed, config.metadata, result, self.log.injected, history, seconds,
                                          steps, exclude=(PROCESS_WRITER,))
            numbers["notes"] = list(self.notes)
            numbers["ok"] = result.ok and not self.notes  # the test's verdict: a note (e.g. a bookie never writable
            # again after healing) fails the run even when every check passed
            numbers["paused_writer"] = self.writer_stop[:300]
            return RunOutcome(config, result, steps, self.log.injected, numbers, self.notes)
        finally:
            self.stop.set()
            try:
                self.cluster.heal_all()  # resumed before anything is stopped: a stopped process ignores SIGTERM
            except (LedgerError, OSError) as exc:
                self.notes.append(f"healing at the end failed: {exc!r}")
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for client in self.clients:
                client.close()

    # --- the schedule ---------------------------------------------------------------
    def _play(self, steps) -> None:
        hooks = {"zk_expiry": self._expire_session, "writer_pause": self._pause_writer}
        play(steps, lambda step: actions.apply(step, self.hosts, self.cluster.network, hooks), self.log, self.config.duration_s)

    def _wait_for_bookies(self) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        want = set(self.cluster.addresses)
        while time.monotonic() < deadline:
            try:
                if want <= set(self.store.bookies(include_read_only=False)):
                    return
            except LedgerError:
                pass
            time.sleep(0.1)
        self.notes.append(f"not every bookie was writable again within {SETTLE_TIMEOUT_S:.0f} s after healing")

    # --- hooks ------------------------------------------------------------------------
    def _expire_session(self, host: Host):
        """Expire the shared client store's ZooKeeper session (another client takes it over and leaves)."""
        from kazoo.client import KazooClient

        session = self.store.inner._session.client.client_id
        thief = KazooClient(hosts=host.address, client_id=session, timeout=2)
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        return lambda: None

    def _pause_writer(self, host: Host):
        """SIGSTOP the writer process, recover its ledger from here, SIGCONT it on heal: it must be fenced."""
        host.pause()
        ledger_id = self._process_ledger()
        # as patient as the recovery after healing: ZooKeeper may be down now (the player heals it meanwhile),
        # and a writer resumed before its ledger was recovered would test nothing (docs/protocol.md F1)
        if ledger_id is not None and self._recover(ledger_id, "recoverer"):
            self.writer_recovered = (ledger_id, time.monotonic())
        return host.resume

    # --- the writer process -------------------------------------------------------------
    def _start_process_writer(self) -> None:
        self.process_history = path_of(self.base_dir, PROCESS_WRITER)
        command = [sys.executable, "-m", "pyspark_ledger.testing.jepsen.writer_process", "--metadata",
                   self.cluster.metadata_uri, "--history", str(self.process_history),
                   "--name", PROCESS_WRITER, "--seed", str(self.config.seed),
                   "--quorums", ",".join(map(str, self.config.quorums)),
                   # longer than the pause: on waking, its adds time out on no bookie, so what stops it is
                   # the bookies' fence (docs/protocol.md F1), not an ensemble change that finds the ledger closed
                   "--add-timeout", str(WRITER_ADD_TIMEOUT_S), "--max-seconds", str(self.config.duration_s * 4)]
        log = open(self.base_dir / f"{PROCESS_WRITER}.log", "wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=child_env())
        log.close()
        self.hosts[PROCESS_WRITER] = LocalProcessHost(PROCESS_WRITER, self.process)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self._process_ledger() is None and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.05)

    def _process_ledger(self) -> int | None:
        try:
            events = list(History.load(self.process_history))
        except FileNotFoundError:
            return None
        created = [event.ledger_id for event in events if event.action == "create" and event.kind == "ok"]
        return created[-1] if created else None

    def _finish_process_writer(self) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(SETTLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.notes.append("the writer process did not stop after it was resumed (it was never fenced)")
            return
        output = (self.base_dir / f"{PROCESS_WRITER}.log").read_text(errors="replace")
        stopped = [line for line in output.splitlines() if line.startswith("stopped: ")]
        self.writer_stop = stopped[-1] if stopped else "(no stop line)"
        # fenced is what is expected; another error (e.g. the metadata store unreachable while ZooKeeper was
        # paused too) also ends it without an acknowledgement; an end by its limits means its adds went on working
        if not stopped or stopped[-1].startswith("stopped: limit") and self.writer_recovered is not None:
            self.notes.append(f"the paused writer was not fenced on waking: {output.strip()[-500:]}")
        if self.writer_recovered is not None:  # docs/protocol.md F1: no add invoked after the recovery succeeds
            ledger_id, recovered_at = self.writer_recovered
            events = list(History.load(self.process_history))
            late = {e.op_id for e in events if e.action == "add" and e.kind == "invoke" and e.time > recovered_at}
            accepted = [e for e in events if e.op_id in late and e.kind == "ok"]
            if accepted:
                self.notes.append(f"the fenced writer had {len(accepted)} add(s) to ledger {ledger_id} acknowledged "
                                  f"after its recovery, e.g. {accepted[0].line()}")

    def _merged_history(self) -> History:
        if self.process is None:
            return self.history
        return History.merge([self.history, History.load(self.process_history)])

    # --- after healing ------------------------------------------------------------------
    def _recover(self, ledger_id: int, who: str, attempts: int = RECOVERY_ATTEMPTS) -> bool:
        client = self._recoverer if hasattr(self, "_recoverer") else None
        if client is None:
            client = self._recoverer = self.client()
        for attempt in range(attempts):
            op = self.history.invoke(who, "recover", ledger_id)
            try:
                reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
                self.history.ok(op, entry_id=reader.last_add_confirmed)
                return True
            except LedgerError as exc:
                self.history.fail(op, exc)
                time.sleep(0.5 * (attempt + 1))
        return False

    def _recover_and_read(self) -> dict[int, LedgerOutcome]:
        outcomes = {}
        ledger_ids = sorted(self.store.list_ledgers())
        for ledger_id in ledger_ids:
            self._recover(ledger_id, "recoverer")
        readers = {name: self.client(self.cluster.open_store()) for name in ("reader-1", "reader-2")}
        for ledger_id in ledger_ids:
            reads = {name: self._read(client, ledger_id, name) for name, client in readers.items()}
            final = self.store.read_ledger(ledger_id).value
            versions = tuple(self.store.history.get(ledger_id, ()))
            outcomes[ledger_id] = LedgerOutcome(ledger_id, final, versions, reads)
        return outcomes

    def _read(self, client: LedgerClient, ledger_id: int, name: str):
        op = self.history.invoke(name, "read", ledger_id)
        try:
            reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
            entries = [(entry.entry_id, digest(bytes(entry.data))) for entry in reader.read()]
            self.history.ok(op, entry_id=entries[-1][0] if entries else -1)
            return entries
        except LedgerError as exc:
            self.history.fail(op, exc)
            return f"{type(exc).__name__}: {exc}"
