"""The namespace cluster as the Jepsen runner's cluster: hosts, network, metadata store, heal-all.

``NetnsFaultCluster.from_file(cluster.json)`` gives what ``jepsen.runner.run_on`` needs: ``hosts`` (each
bookie ``bk*`` and ZooKeeper server ``zk*`` as a ``fault_hosts.ProcessHost``, plus ``zk-leader``, the
ensemble's leader of the moment), ``network`` (a ``partitions.NetnsNetwork`` over every host of the
cluster, the driver's too, so partitions cut between any of them), ``addresses`` (bookie id -> the
address clients dial: the same, since each bookie registers its host's address), ``metadata_uri`` and
``open_store()`` (``faults.cluster_base``: the plain store, hooked to record ledger versions; the bookies'
``--host ADDR`` registrations already name the addresses clients dial). It must run on the driver host (a process under ``ip netns exec <driver ns>``): the root
namespace has no route to the cluster. ``heal_all()`` removes every cut, resumes every process and
restarts what was killed; ``close()`` heals and closes the stores it opened. Stopping the cluster stays
with its owner (``NetnsCluster.stop``), which also removes what was restarted here.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.testing.cluster.fault_hosts import ProcessHost, ZooKeeperLeaderHost
from pyspark_ledger.testing.cluster.partitions import NetnsNetwork
from pyspark_ledger.testing.faults.cluster_base import FaultClusterBase
from pyspark_ledger.testing.faults.hosts import Host

MAX_FILE_BYTES = 1 << 20
LEADER_HOST = "zk-leader"


class NetnsFaultCluster(FaultClusterBase):
    """See the module docstring."""

    def __init__(self, description: dict) -> None:
        super().__init__()
        uri = description.get("metadata_uri", "")
        if not uri.startswith("zk://"):
            raise InvalidConfigurationError(f"the cluster file's metadata_uri must be zk:// (a ZooKeeper ensemble "
                                            f"on the cluster), got {uri!r}")
        entries = description.get("hosts")
        entries = list(entries.values()) if isinstance(entries, dict) else list(entries or ())
        self.metadata_uri = uri
        self.entries = {entry["name"]: entry for entry in entries}
        self.servers: dict[str, ProcessHost] = {}
        for entry in entries:
            for role in ("zookeeper", "bookie"):
                if role in entry.get("processes", {}):
                    self.servers[entry["name"]] = ProcessHost(entry, role)
        self.hosts: dict[str, Host] = dict(self.servers)
        zookeepers = [host for host in self.servers.values() if host.role == "zookeeper"]
        if zookeepers:
            self.hosts[LEADER_HOST] = ZooKeeperLeaderHost(zookeepers, LEADER_HOST)
        self.network = NetnsNetwork({name: SimpleNamespace(netns=entry["netns"], address=entry["address"])
                                     for name, entry in self.entries.items()})
        self.addresses = {host.address: host.address for host in self.servers.values() if host.role == "bookie"}

    @classmethod
    def from_file(cls, path: str | Path) -> "NetnsFaultCluster":
        path = Path(path)
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidConfigurationError(f"cluster file {path} is larger than {MAX_FILE_BYTES} bytes")
        return cls(json.loads(path.read_text()))

    def heal_all(self) -> None:
        """Remove every cut, resume every process, restart whatever was killed (waits until each serves)."""
        self.network.heal()
        for host in self.servers.values():
            host.resume()
        for host in self.servers.values():
            if not host.pids():
                host.restart()

    def close(self) -> None:
        try:
            self.heal_all()
        finally:
            self.close_stores()
