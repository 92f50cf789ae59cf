"""Faults on the namespace cluster (issue 17 part 4; docs/jepsen.md, "On the namespace cluster").

Quick (seconds, root only, skipped otherwise): blackhole-route partitions between two bare namespaces,
symmetric and one-way, checked with a real TCP echo: an established connection stalls (never resets)
while cut, and its held bytes arrive once healed.

Slow (a minute each): on the cluster's ZooKeeper ensemble and
bookies, (1) writers on the driver host while a seeded schedule partitions two bookies from the driver,
cuts a third one way, kills the ZooKeeper leader (kill -9, restarted), SIGSTOPs a bookie, pauses the
writer process, expires the runner's ZooKeeper session, and cuts a bookie from other bookies and one from
ZooKeeper (symmetric or one way); then heal, recover, read back and check
(docs/protocol.md I1-I5); ``LEDGER_JEPSEN_SEED`` / ``LEDGER_JEPSEN_SCHEDULES`` / ``LEDGER_JEPSEN_RESULTS``
as for the local schedules; only with ``LEDGER_CLUSTER_TESTS=1``. (2) A bookie cut from the whole ensemble
for longer than its session leaves the registry and registers again once healed; by default where namespaces
can be made (CI runs it), not with ``LEDGER_CLUSTER_TESTS=0``.
"""
from __future__ import annotations

import errno
from collections import Counter
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, InvalidStateError
from pyspark_ledger.testing.bookies import child_env
from pyspark_ledger.testing.cluster import NetnsCluster, default_spec, netns
from pyspark_ledger.testing.cluster import fault_hosts
from pyspark_ledger.testing.cluster.fault_cluster import NetnsFaultCluster
from pyspark_ledger.testing.cluster.fault_hosts import ZooKeeperLeaderHost
from pyspark_ledger.testing.cluster.fault_run import cut_label, schedule
from pyspark_ledger.testing.cluster.network import Network
from pyspark_ledger.testing.cluster.partitions import NetnsNetwork
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.zookeeper import ZooKeeperServer
from tests.cluster.conftest import cluster_tests, jepsen_seeds, run_on_driver, skip_unless_netns
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(1800)


class _Echo:
    """A TCP echo server inside a namespace that also keeps what it received."""

    def __init__(self, namespace: str, address: str) -> None:
        self.server = netns.listen_in(namespace, address)
        self.port = self.server.getsockname()[1]
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self.server.accept()
        except OSError:
            return
        with connection:
            while True:
                try:
                    data = connection.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                self.received += data
                connection.sendall(data)

    def close(self) -> None:
        self.server.close()
        self.thread.join(5)


def _stalls(sock: socket.socket, data: bytes) -> None:
    sock.sendall(data)
    sock.settimeout(1.0)
    with pytest.raises(socket.timeout):
        sock.recv(100)


def _arrives(sock: socket.socket, data: bytes) -> None:
    sock.settimeout(15.0)    # the retransmission timer backed off while cut
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(100)
        assert chunk, "the connection was closed instead of resuming"
        got += chunk
    assert got == data


def _blackholes(namespace: str) -> list[str]:
    return [line for line in netns.ip_command("route", "show", netns=namespace).splitlines() if "blackhole" in line]


def test_blackhole_partitions_stall_tcp_and_heal():
    skip_unless_netns()
    with Network(["a", "b"]) as bare:
        a, b = bare.hosts["a"], bare.hosts["b"]
        network = NetnsNetwork(bare.hosts)
        echo = _Echo(b.netns, b.address)
        try:
            with netns.connect_in(a.netns, b.address, echo.port) as sock:
                sock.sendall(b"0")
                _arrives(sock, b"0")

                cut = network.partition(["a"], ["b"])                       # symmetric
                assert network.cuts() == {("a", "b"), ("b", "a")}
                assert len(_blackholes(a.netns)) == len(_blackholes(b.netns)) == 1
                _stalls(sock, b"1")
                with pytest.raises(OSError) as refused:                    # new connections fail from the cut side
                    netns.connect_in(a.netns, b.address, echo.port, timeout_s=2).close()
                assert refused.value.errno in (errno.EINVAL, None)         # None: a timeout
                network.restore(cut)
                assert network.cuts() == set() and _blackholes(a.netns) == _blackholes(b.netns) == []
                _arrives(sock, b"1")                                       # held, not reset

                cut = network.partition(["a"], ["b"], "out")               # one way: a's bytes never arrive
                assert network.cuts() == {("a", "b")} and _blackholes(b.netns) == []
                before = len(echo.received)
                _stalls(sock, b"2")
                assert len(echo.received) == before
                network.restore(cut)
                _arrives(sock, b"2")

                cut = network.partition(["a"], ["b"], "in")                # one way: b's answers never arrive
                assert network.cuts() == {("b", "a")} and _blackholes(a.netns) == []
                before = len(echo.received)
                _stalls(sock, b"3")
                assert len(echo.received) == before + 1                   # b got it; its echo is dropped
                overlapping = network.partition(["b"], ["a"], "out")       # the same route, wanted twice
                network.restore(cut)
                assert network.cuts() == {("b", "a")}                      # still wanted by the second cut
                network.heal()
                assert network.cuts() == set() and _blackholes(a.netns) == []
                network.restore(overlapping)                               # already healed: nothing to do
                _arrives(sock, b"3")
        finally:
            echo.close()
            network.close()
    assert not [name for name in netns.list_namespaces() if name.startswith(bare.prefix)]


def test_bad_partitions_are_refused():
    class _H:
        netns, address = "ns-x", "10.0.0.1"
    network = NetnsNetwork({"x": _H(), "y": _H()})
    with pytest.raises(InvalidArgumentError, match="unknown hosts"):
        network.partition(["x"], ["nope"])
    with pytest.raises(InvalidArgumentError, match="both sides"):
        network.partition(["x"], ["x", "y"])
    with pytest.raises(InvalidArgumentError, match="direction"):
        network.partition(["x"], ["y"], "sideways")
    with pytest.raises(InvalidStateError, match="netem"):
        network.delay(type("Host", (), {"name": "x"})(), 0.1)
    assert network.cuts() == set()


BOOKIES = [f"bk{index}" for index in range(1, 6)]
ZOOKEEPERS = ["zk1", "zk2", "zk3"]


def _driver_steps(steps):
    """The steps that cut a bookie from the driver or pause it."""
    return [step for step in steps if step.kind == sched.PAUSE or step.params.get("peers") == ("driver",)]


def test_the_namespace_schedule_is_seeded():
    first = schedule(3, BOOKIES, zookeepers=ZOOKEEPERS)
    assert first == schedule(3, BOOKIES, zookeepers=ZOOKEEPERS) and first != schedule(4, BOOKIES, zookeepers=ZOOKEEPERS)
    assert _driver_steps(first) == _driver_steps(schedule(3, BOOKIES))   # the cuts between servers come on top
    kill, expiry = (next(step for step in first if step.kind == kind) for kind in (sched.ZK_KILL, sched.ZK_EXPIRY))
    assert kill.ends_s < expiry.at_s
    bookie_steps = _driver_steps(first)
    assert sorted(step.kind for step in bookie_steps) == sorted([sched.PARTITION, sched.ONE_WAY, sched.PAUSE])
    for before, after in zip(bookie_steps, bookie_steps[1:]):     # at most two bookies cut at a time
        assert before.ends_s < after.at_s
    targets = {step.target for step in bookie_steps} | set(bookie_steps[0].params["group"])
    assert len(targets) == 4
    with pytest.raises(InvalidArgumentError, match="4 bookies"):
        schedule(1, BOOKIES[:3])


def test_the_namespace_schedule_cuts_bookies_from_zookeeper_and_from_each_other():
    """Over seeds, a bookie is cut from another bookie and from ZooKeeper (all of it, or one server), both ways
    and one way in each direction; the driver is never a side of those cuts."""
    seen = set()
    for seed in range(1, 41):
        for step in schedule(seed, BOOKIES, zookeepers=ZOOKEEPERS):
            peers = step.params.get("peers", ())
            if step.kind not in (sched.PARTITION, sched.ONE_WAY) or peers == ("driver",):
                continue
            assert step.target in BOOKIES and step.target not in peers and "driver" not in peers, step
            direction = step.params.get("direction", "both")
            assert (step.kind == sched.PARTITION) == (direction == "both"), step
            if set(peers) <= set(ZOOKEEPERS):
                seen.add(("zookeeper", "all" if len(peers) == len(ZOOKEEPERS) else "one", direction))
                assert 3.0 <= step.duration_s <= 11.0 and step.ends_s < 18.0, step
            else:
                assert set(peers) <= set(BOOKIES) and 1 <= len(peers) <= 2, step
                seen.add(("bookie", direction))
    assert {("bookie", direction) for direction in ("both", "in", "out")} <= seen, seen
    assert {("zookeeper", part, direction) for part in ("all", "one") for direction in ("both", "in", "out")} <= seen
    roles = {**{name: "bookie" for name in BOOKIES}, **{name: "zookeeper" for name in ZOOKEEPERS}}
    labels = {cut_label(step, roles) for step in schedule(3, BOOKIES, zookeepers=ZOOKEEPERS)}
    assert {"partition bookie-driver", "zk-kill", "pause"} <= labels
    assert any(label.endswith("bookie-zookeeper") for label in labels), labels



def _entry(name: str, address: str, role: str | None) -> dict:
    processes = {role: {"pid": 4242, "pgid": 4242, "log": f"/tmp/{name}.log", "command": ["true"]}} if role else {}
    return {"name": name, "netns": f"plc1n0-{name}", "address": address, "zone": "zone-a", "processes": processes}


def test_a_cluster_file_becomes_fault_hosts():
    description = {"metadata_uri": "zk://10.9.9.11:2181/ledger", "hosts": [
        _entry("zk1", "10.9.9.11", "zookeeper"), _entry("bk1", "10.9.9.12", "bookie"),
        _entry("driver", "10.9.9.13", None)]}
    cluster = NetnsFaultCluster(description)
    assert cluster.roles() == {"zk1": "zookeeper", "bk1": "bookie", "zk-leader": "zookeeper"}
    assert cluster.addresses == {"10.9.9.12:3181": "10.9.9.12:3181"}
    assert cluster.hosts["zk-leader"].address == "10.9.9.11:2181"
    assert sorted(cluster.network.hosts) == ["bk1", "driver", "zk1"]     # the driver can be partitioned too
    with pytest.raises(InvalidConfigurationError, match="zk://"):
        NetnsFaultCluster({**description, "metadata_uri": "sqlite:///tmp/m.db"})



class _Server:
    """A ZooKeeper server as ZooKeeperLeaderHost sees it: a name, a ``srvr`` mode, kill and restart."""

    def __init__(self, name: str, mode: str, log: list) -> None:
        self.name, self.answer, self.log = name, mode, log

    def mode(self) -> str:
        return self.answer

    def pids(self) -> list[int]:
        return [1] if self.answer else []

    def kill(self) -> None:
        self.answer = ""
        self.log.append(f"{self.name} killed")

    def restart(self) -> None:
        self.answer = "Mode: follower"
        self.log.append(f"{self.name} restarted")


def test_a_killed_zookeeper_leader_is_restarted_only_once_another_server_leads(monkeypatch):
    """Under load the restart raced the survivors' election and won it (seed 2, load 22-35): it says nothing
    about two of three servers electing. The heal now waits for the election (or ZooKeeper's own limit)."""
    log: list[str] = []
    servers = [_Server("zk1", "Mode: follower", log), _Server("zk2", "Mode: follower", log),
               _Server("zk3", "Mode: leader", log)]
    leader = ZooKeeperLeaderHost(servers)
    leader.kill()
    elect = threading.Timer(0.5, lambda: (setattr(servers[1], "answer", "Mode: leader"), log.append("zk2 leads")))
    elect.start()
    leader.restart()              # returns once zk2 leads
    elect.join()
    assert log == ["zk3 killed", "zk2 leads", "zk3 restarted"]
    wait_until(lambda: leader.successors, what="the election timing")
    assert leader.successors == ["zk2"] and 0.4 < leader.elections_s[0] < 30
    monkeypatch.setattr(fault_hosts, "ELECTION_WAIT_S", 0.3)
    monkeypatch.setattr(fault_hosts, "ELECTION_TIMEOUT_S", 5.0)
    servers[1].answer = "Mode: follower"
    servers[2].answer = "Mode: leader"
    leader.kill()                 # no one else leads: the restart still comes, after ELECTION_WAIT_S
    started = time.monotonic()
    leader.restart()
    assert log[-1] == "zk3 restarted" and time.monotonic() - started >= 0.3


RUN_TIMEOUT_S = 600
CLUSTER_TESTS = cluster_tests() == "all"


@pytest.mark.skipif(not CLUSTER_TESTS, reason="a fault run on the namespace cluster takes minutes: set "
                                              "LEDGER_CLUSTER_TESTS=1 to run it")
@pytest.mark.parametrize("seed", jepsen_seeds() if CLUSTER_TESTS else [1])
def test_a_fault_schedule_on_the_namespace_cluster(seed, tmp_path):
    """ZooKeeper ensemble and five bookies in namespaces; writers on the driver host while two bookies are
    partitioned from the driver, a third cut one way, the ZooKeeper leader killed, a fourth paused and the
    writer process paused, and a ZooKeeper session expired; a bookie cut from other bookies and one from
    ZooKeeper (both ways or one way, as the seed draws); then heal, recover, read back and check
    docs/protocol.md I1-I5 (docs/jepsen.md)."""
    skip_unless_netns()
    if not ZooKeeperServer.is_available():
        pytest.skip(f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
    cluster = NetnsCluster(default_spec(spark=False, driver=True), tmp_path / "cluster")
    started = time.monotonic()
    with cluster:
        up_s = time.monotonic() - started
        numbers, done = run_on_driver(cluster, "pyspark_ledger.testing.cluster.fault_run", seed, tmp_path / "run",
                                      up_s=up_s, timeout_s=RUN_TIMEOUT_S)
        numbers["run_s"] = round(time.monotonic() - started - up_s, 1)
        results = os.environ.get("LEDGER_JEPSEN_RESULTS")
        if results:
            figures.write(Path(results) / f"run-netns-{seed}.json", numbers)
            figures.write(Path(results) / "summary-netns.json",
                          figures.summarize(json.loads(path.read_text())
                                            for path in sorted(Path(results).glob("run-netns-*.json"))))
        print(json.dumps(numbers, sort_keys=True))
        assert done.returncode == 0, f"seed {seed} failed:\n{done.stderr[-6000:]}\nfigures: {numbers}"
    assert not [name for name in netns.list_namespaces() if name.startswith(cluster.prefix)]
    assert numbers["lost"] == numbers["divergent"] == 0 and numbers["acknowledged"] > 0, numbers
    expected = Counter(step.kind for step in schedule(seed, BOOKIES, zookeepers=ZOOKEEPERS))
    assert numbers["faults"] == {**expected, sched.WRITER_PAUSE: 1}, numbers
    assert any(label.endswith("bookie-zookeeper") for label in numbers["unavailability_by_cut_s"]), numbers
    assert any(label.endswith("bookie-bookie") for label in numbers["unavailability_by_cut_s"]), numbers
    assert len(numbers["zookeeper_leaders_lost"]) == len(numbers["zookeeper_election_s"]) == 1, numbers
    # the server killed was the leader: another one took over (before the killed one came back)
    assert numbers["zookeeper_new_leaders"][0] not in ("", numbers["zookeeper_leaders_lost"][0]), numbers
    assert not numbers["fault_errors"], numbers


def _registered(cluster) -> dict[str, str]:
    """Bookie id -> mode, as the metadata store lists them, asked from the driver host."""
    done = cluster.run_on("driver", [sys.executable, "-m", "pyspark_ledger.cli.main", "bookies", "--metadata",
                                     cluster.metadata_uri, "--json"], env=child_env(),
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    return {entry["bookie_id"]: entry["mode"] for entry in json.loads(done.stdout)}


@pytest.mark.skipif(cluster_tests() == "off", reason="LEDGER_CLUSTER_TESTS=0 leaves out the namespace cluster")
def test_a_bookie_cut_from_zookeeper_leaves_the_registry_and_comes_back(tmp_path):
    """A partition between one bookie and the whole ensemble (the driver still reaches it), longer than its
    session (10 s): the bookie drops out of the registry but keeps running, and registers again, writable,
    once healed."""
    skip_unless_netns()
    if not ZooKeeperServer.is_available():
        pytest.skip(f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
    cluster = NetnsCluster(default_spec(bookies=3, spark=False, driver=True), tmp_path / "cluster")
    with cluster:
        network = NetnsNetwork(cluster.hosts)
        bookie = cluster.hosts["bk3"]
        bookie_id = f"{bookie.address}:3181"
        assert _registered(cluster).get(bookie_id) == "writable"
        cut = network.partition(["bk3"], [host.name for host in cluster.with_role("zookeeper")])
        try:
            wait_until(lambda: bookie_id not in _registered(cluster), timeout=90, interval=1,
                       what="the cut bookie's session to expire")
            assert bookie.processes["bookie"].running() and cluster.reachable("driver", "bk3", 3181)
        finally:
            network.restore(cut)
        wait_until(lambda: _registered(cluster).get(bookie_id) == "writable", timeout=90, interval=1,
                   what="the bookie to register again")
    assert not [name for name in netns.list_namespaces() if name.startswith(cluster.prefix)]
