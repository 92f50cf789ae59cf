"""Fault actions on hosts (pyspark_ledger/testing/faults/actions.py, hosts.py): a pause is SIGSTOP until healed,
a kill is SIGKILL, unknown hosts and kinds are refused, and AdvertisedStore gives clients the proxy's address of
a bookie."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.faults import actions, schedule as sched
from pyspark_ledger.testing.faults.hosts import AdvertisedStore, LocalProcessHost, ProxyNetwork
from pyspark_ledger.testing.faults.play import play
from pyspark_ledger.testing.faults.proxy import FaultProxy
from pyspark_ledger.testing.jepsen import spark_run
from pyspark_ledger.testing.zookeeper import ZooKeeperServer
from tests.waiting import wait_until


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield LocalProcessHost("writer-p", process)
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_pause_stops_the_process_until_healed(sleeper):
    step = sched.Step(0.0, sched.PAUSE, "writer-p", 1.0)
    heal = actions.apply(step, {"writer-p": sleeper}, ProxyNetwork())
    wait_until(lambda: _state(sleeper.process.pid) == "T", 10, "the process to stop")
    heal()
    heal()  # idempotent
    wait_until(lambda: _state(sleeper.process.pid) != "T", 10, "the process to continue")


def test_a_kill_is_sigkill_and_a_writer_cannot_be_restarted(sleeper):
    heal = actions.apply(sched.Step(0.0, sched.KILL, "writer-p", 1.0), {"writer-p": sleeper}, ProxyNetwork())
    assert sleeper.process.returncode == -9 and sleeper.pids() == []
    with pytest.raises(InvalidStateError, match="cannot be restarted"):
        heal()


def test_bad_steps_are_refused(sleeper):
    hosts = {"writer-p": sleeper}
    with pytest.raises(InvalidArgumentError, match="unknown host"):
        actions.apply(sched.Step(0.0, sched.PAUSE, "bookie-9", 1.0), hosts, ProxyNetwork())
    with pytest.raises(InvalidArgumentError, match="no proxy"):
        actions.apply(sched.Step(0.0, sched.PARTITION, "writer-p", 1.0), hosts, ProxyNetwork())
    with pytest.raises(InvalidArgumentError, match="hook"):
        actions.apply(sched.Step(0.0, sched.WRITER_PAUSE, "writer-p", 1.0), hosts, ProxyNetwork())
    with pytest.raises(InvalidStateError, match="no disk"):
        actions.apply(sched.Step(0.0, sched.DISK_FULL, "writer-p", 1.0), hosts, ProxyNetwork())


def test_the_fault_log_counts_what_was_injected():
    log = actions.FaultLog()
    record = log.started(sched.Step(0.0, sched.PAUSE, "b", 1.0))
    log.started(sched.Step(0.0, sched.KILL, "b", 1.0), error="OSError: gone")
    time.sleep(0.01)
    log.healed(record)
    assert log.per_kind() == {sched.PAUSE: 1} and record.healed > record.started


def test_clients_are_given_the_advertised_address(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    with open_metadata_store(uri, create=True) as inner:
        registration = inner.register_bookie("127.0.0.1:2", {"host": "127.0.0.1", "port": 1})
        store = AdvertisedStore(inner, {"127.0.0.1:2": "127.0.0.1:2"})
        assert store.bookies()["127.0.0.1:2"].info["port"] == 2
        assert inner.bookies()["127.0.0.1:2"].info["port"] == 1
        registration.close()


def test_a_slow_fault_action_holds_up_no_other_step():
    """pyspark_ledger/testing/faults/play.py: a step whose apply takes long (the writer-pause hook recovering a
    ledger while ZooKeeper is down; a restart) delays neither the start nor the heal of the steps around it."""
    log = actions.FaultLog()
    healed_at: dict[str, float] = {}
    begin = time.monotonic()

    def apply(step):
        if step.target == "slow":
            time.sleep(1.5)
        return lambda: healed_at.setdefault(step.target, time.monotonic() - begin)

    steps = [sched.Step(0.0, sched.WRITER_PAUSE, "slow", 0.1), sched.Step(0.1, sched.ZK_PAUSE, "zookeeper", 0.3)]
    play(steps, apply, log, duration_s=0.5)
    assert healed_at["zookeeper"] < 1.0, healed_at      # on time: 0.4 s after the start, not after the slow step
    assert healed_at["slow"] >= 1.5, healed_at          # healed once its own apply returned
    quick = next(record for record in log.injected if record.step.target == "zookeeper")
    assert quick.healed - quick.started < 0.8


def test_a_failed_step_is_recorded_and_a_broken_one_raised():
    log = actions.FaultLog()

    def apply(step):
        if step.target == "gone":
            raise OSError("no such process")
        if step.target == "broken":
            raise ValueError("a bug in an action")
        return lambda: None

    steps = [sched.Step(0.0, sched.PAUSE, "gone", 0.1), sched.Step(0.0, sched.PAUSE, "fine", 0.1)]
    play(steps, apply, log, duration_s=0.1)
    assert log.per_kind() == {sched.PAUSE: 1}
    assert [record.error for record in log.injected if record.step.target == "gone"] == ["OSError: no such process"]
    with pytest.raises(ValueError, match="a bug"):
        play([sched.Step(0.0, sched.PAUSE, "broken", 0.1)], apply, actions.FaultLog(), duration_s=0.1)


def test_the_steps_of_one_host_keep_their_order():
    """A second kill of a server waits until the first one's restart (which outlasted its scheduled end) is
    done; a partition of that host does not wait for its processes' steps."""
    log = actions.FaultLog()
    events: list[tuple[str, float]] = []
    begin = time.monotonic()

    def apply(step):
        events.append((f"apply {step.kind} {step.at_s}", time.monotonic() - begin))

        def heal():
            if step.at_s == 0.0:
                time.sleep(1.0)     # a slow restart
            events.append((f"heal {step.kind} {step.at_s}", time.monotonic() - begin))
        return heal

    steps = [sched.Step(0.0, sched.ZK_KILL, "zookeeper", 0.2), sched.Step(0.4, sched.ZK_KILL, "zookeeper", 0.2),
             sched.Step(0.5, sched.PARTITION, "zookeeper", 0.1)]
    play(steps, apply, log, duration_s=0.1)
    order = [name for name, _ in events]
    assert order.index("heal zk-kill 0.0") < order.index("apply zk-kill 0.4"), events
    assert dict(events)["heal partition 0.5"] < 1.0, events


@pytest.mark.skipif(not ZooKeeperServer.is_available(), reason=f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
def test_the_spark_jobs_zk_expiry_expires_its_session_and_the_store_goes_on(tmp_path):
    """spark_run's zk-expiry: a client behind the job's proxy comes back with a new session, and works."""
    with ZooKeeperServer(tmp_path / "zk") as server:
        proxy = FaultProxy(server.connect_string)
        try:
            uri = server.uri("/cut", session_timeout=spark_run.JOB_SESSION_S).replace(server.connect_string,
                                                                                     proxy.address)
            store = open_metadata_store(uri, create=True)
            try:
                before = store._session.session_id
                heal = spark_run.cut_until_expired(proxy)
                heal()
                wait_until(lambda: store._session.session_id not in (None, before), 30, "a new session")
                assert store.bookies() == {}
            finally:
                store.close()
        finally:
            proxy.close()
