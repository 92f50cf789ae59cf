"""The cluster tool itself: namespaces made and removed, hosts reach each other (and only through the bridge),
and a failure half-way through the start leaves no namespace and no process behind."""
from __future__ import annotations

import ipaddress
import os
import shutil

import pytest

from pyspark_ledger.errors import ClusterError
from pyspark_ledger.testing.cluster import NetnsCluster, default_spec, leftovers, netns
from pyspark_ledger.testing.cluster.network import Network
from pyspark_ledger.testing.cluster.processes import HostProcess
from tests.cluster.conftest import skip_unless_netns, skip_unless_services
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(600)


def _ours(prefix: str) -> list[str]:
    return [name for name in netns.list_namespaces() if name.startswith((prefix + "-", prefix + "."))]


def test_namespaces_are_made_joined_and_removed():
    skip_unless_netns()
    with Network(["a", "b", "c"]) as network:
        assert sorted(_ours(network.prefix)) == sorted([network.switch] + [f"{network.prefix}-{n}" for n in "abc"])
        assert network.owner_file.exists()
        a, b = network.hosts["a"], network.hosts["b"]
        assert a.address != b.address
        assert all(ipaddress.ip_address(host.address) in network.subnet for host in network.hosts.values())
        with netns.listen_in(b.netns, b.address) as server:
            port = server.getsockname()[1]
            netns.connect_in(a.netns, b.address, port).close()      # a reaches b over the bridge
            with pytest.raises(OSError):                            # but not what b binds on its loopback
                netns.connect_in(a.netns, "127.0.0.1", port, timeout_s=1).close()
        assert netns.namespace_pids(a.netns) == []
    assert _ours(network.prefix) == []
    assert not network.owner_file.exists()


def test_a_failure_half_way_removes_every_namespace_and_process():
    skip_unless_services()
    seen: dict[str, list[int]] = {}

    def fail_after_bookies(step: str) -> None:
        if step == "bookies":
            seen["pids"] = [process.pid for host in cluster.hosts.values() for process in host.processes.values()]
            seen["namespaces"] = _ours(cluster.prefix)
            raise RuntimeError("injected failure after the bookies started")

    spec = default_spec(zookeepers=3, bookies=2, spark=False)
    cluster = NetnsCluster(spec, on_step=fail_after_bookies)
    with pytest.raises(RuntimeError, match="injected"):
        cluster.start()
    assert len(seen["pids"]) == 5 and len(seen["namespaces"]) == 6   # 3 ZooKeeper + 2 bookies; + the switch
    assert _ours(cluster.prefix) == []
    assert [pid for pid in seen["pids"] if _alive(pid)] == []
    assert cluster.prefix not in leftovers.prefixes()
    assert cluster.base_dir.exists()   # kept: its logs say what failed
    shutil.rmtree(cluster.base_dir)


def test_leftovers_of_a_dead_owner_are_found_and_removed():
    skip_unless_netns()
    network = Network(["x"]).up()
    try:
        assert network.prefix not in leftovers.stale_prefixes()          # its owner (this process) lives
        network.owner_file.write_text('{"pid": 999999999, "start_time": "1"}')   # as if the owner had died
        assert network.prefix in leftovers.stale_prefixes()
        assert sorted(leftovers.clean_prefix(network.prefix)) == sorted([network.switch, f"{network.prefix}-x"])
        assert _ours(network.prefix) == [] and not network.owner_file.exists()
    finally:
        network.down()


def test_a_process_left_in_a_namespace_is_killed_with_it(tmp_path):
    skip_unless_netns()
    network = Network(["y"]).up()
    process = HostProcess("sleeper", network.hosts["y"].netns, ["sleep", "300"], tmp_path / "sleeper.log")
    process.start()
    try:
        # `ip netns exec` enters the namespace a moment after the process starts
        wait_until(lambda: process.pid in netns.namespace_pids(network.hosts["y"].netns), timeout=10,
                   what="the sleeper to be in its namespace")
    finally:
        assert network.down() == []
    process.process.wait(10)
    assert not _alive(process.pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cluster_error_for_a_namespace_that_exists():
    skip_unless_netns()
    network = Network(["z"]).up()
    try:
        clash = Network(["z"], prefix=network.prefix)
        with pytest.raises(ClusterError, match="exist already"):
            clash.up()
        assert _ours(network.prefix) != []   # the clash removed nothing of the first run's
    finally:
        assert network.down() == []
    assert os.path.exists(network.owner_file) is False
