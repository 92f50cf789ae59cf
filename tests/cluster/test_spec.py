"""The cluster's layout (no root needed): issue 17's hosts and zones, and specs that cannot work refused."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.testing.cluster import ClusterSpec, HostSpec, default_spec


def test_the_default_layout_has_every_role_on_a_host_of_its_own():
    spec = default_spec()
    assert [host.name for host in spec.with_role("zookeeper")] == ["zk1", "zk2", "zk3"]
    bookies = spec.with_role("bookie")
    assert [host.zone for host in bookies] == ["zone-a", "zone-a", "zone-a", "zone-b", "zone-b"]
    assert [host.name for host in spec.with_role("spark-worker")] == ["worker1", "worker2"]
    assert len(spec.with_role("spark-master")) == len(spec.with_role("driver")) == 1
    assert all(len(host.roles) == 1 for host in spec.hosts)
    assert [host.name for host in default_spec(spark=False).hosts if "driver" in host.roles] == []


@pytest.mark.parametrize("build,words", [
    (lambda: HostSpec("Bad-Name", ("bookie",)), "host name"),
    (lambda: HostSpec("toolongname", ("bookie",)), "host name"),
    (lambda: HostSpec("h1", ("database",)), "unknown roles"),
    (lambda: ClusterSpec((HostSpec("a", ("bookie",)), HostSpec("a", ("bookie",)))), "unique"),
    (lambda: ClusterSpec((HostSpec("w", ("spark-worker",)),)), "need a spark-master"),
    (lambda: default_spec(zookeepers=10), "zookeepers must be"),
    (lambda: default_spec(zones=()), "at least one zone"),
])
def test_a_spec_that_cannot_work_is_refused(build, words):
    with pytest.raises(InvalidConfigurationError, match=words):
        build()
