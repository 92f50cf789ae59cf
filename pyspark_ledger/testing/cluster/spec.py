"""What the test cluster is made of: hosts, their zones and the roles they play.

A ``ClusterSpec`` lists ``HostSpec``s; each host gets its own network
namespace and address and runs the services of its roles:

- ``zookeeper``: one server of the ZooKeeper ensemble (``server.N`` in every zoo.cfg);
- ``bookie``: one bookie server;
- ``spark-master``: the Spark standalone master; ``spark-worker``: a Spark worker;
- ``driver``: nothing at start; the Spark driver (``ledger demo --cluster``) runs there.

``default_spec()`` is the layout of issue 17: 3 ZooKeeper hosts, 5 bookie hosts
over 2 zones, a Spark master, 2 workers and a driver host, each role on a host
of its own, so every request a Spark task makes to a bookie or to ZooKeeper
crosses the bridge. A host's ``zone`` and ``rack`` are recorded in the cluster
file and given to its bookie as ``--zone``/``--rack`` when the bookie server has
those flags (issue 17 part 3).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark_ledger.errors import InvalidConfigurationError

ROLES = ("zookeeper", "bookie", "spark-master", "spark-worker", "driver")
MAX_HOSTS = 200
_HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")


@dataclass(frozen=True)
class HostSpec:
    name: str                 # short: part of the namespace name (a-z, 0-9, at most 8)
    roles: tuple[str, ...]
    zone: str = ""            # e.g. "zone-a"; "" = none
    rack: str = ""            # e.g. "rack-1"; "" = none

    def __post_init__(self) -> None:
        if not _HOST_NAME.match(self.name):
            raise InvalidConfigurationError(f"host name {self.name!r} must be 1 to 8 of a-z, 0-9, starting "
                                            "with a letter")
        unknown = [role for role in self.roles if role not in ROLES]
        if unknown:
            raise InvalidConfigurationError(f"host {self.name}: unknown roles {unknown}; known: {', '.join(ROLES)}")


@dataclass(frozen=True)
class ClusterSpec:
    hosts: tuple[HostSpec, ...]
    spark_worker_memory: str = "1g"        # each worker offers this much to executors
    spark_executor_memory: str = "768m"
    spark_worker_cores: int = 1
    zookeeper_heap: str = "256m"
    bookie_flags: dict = field(default_factory=dict)  # extra bookie-server flags (name -> value)

    def __post_init__(self) -> None:
        names = [host.name for host in self.hosts]
        if not 1 <= len(names) <= MAX_HOSTS:
            raise InvalidConfigurationError(f"a cluster has 1 to {MAX_HOSTS} hosts, got {len(names)}")
        if len(set(names)) != len(names):
            raise InvalidConfigurationError(f"host names must be unique, got {names}")
        if sum("spark-master" in host.roles for host in self.hosts) > 1:
            raise InvalidConfigurationError("at most one host may be the spark-master")
        if self.with_role("spark-worker") and not self.with_role("spark-master"):
            raise InvalidConfigurationError("spark-worker hosts need a spark-master host")

    def with_role(self, role: str) -> list[HostSpec]:
        return [host for host in self.hosts if role in host.roles]


def default_spec(zookeepers: int = 3, bookies: int = 5, workers: int = 2, zones: tuple[str, ...] = ("zone-a", "zone-b"),
                 spark: bool = True, driver: bool | None = None) -> ClusterSpec:
    """Issue 17's layout (see the module docstring); ``spark=False`` leaves out the master, workers and (unless
    ``driver=True``) the driver host: ZooKeeper and bookies, with a host to run clients on."""
    for name, count, low, high in (("zookeepers", zookeepers, 0, 9), ("bookies", bookies, 0, 50),
                                   ("workers", workers, 0, 9)):
        if not low <= count <= high:
            raise InvalidConfigurationError(f"{name} must be {low} to {high}, got {count}")
    if not zones:
        raise InvalidConfigurationError("give at least one zone")

    def zone(index: int) -> str:
        return zones[index * len(zones) // max(bookies, 1)]   # contiguous runs: zone-a, zone-a, zone-b, ...

    hosts = [HostSpec(f"zk{i + 1}", ("zookeeper",), zones[i % len(zones)]) for i in range(zookeepers)]
    hosts += [HostSpec(f"bk{i + 1}", ("bookie",), zone(i)) for i in range(bookies)]
    if spark:
        hosts.append(HostSpec("master", ("spark-master",), zones[0]))
        hosts += [HostSpec(f"worker{i + 1}", ("spark-worker",), zones[i % len(zones)]) for i in range(workers)]
    if spark if driver is None else driver:
        hosts.append(HostSpec("driver", ("driver",), zones[0]))
    return ClusterSpec(tuple(hosts))
