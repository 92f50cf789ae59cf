"""``NetnsCluster``: the whole test cluster of issue 17 up, described in a file, and down again.

::

    with NetnsCluster(default_spec()) as cluster:
        cluster.metadata_uri          # zk://<zk1>:2181,<zk2>:2181,<zk3>:2181/ledger
        cluster.master_url            # spark://<master>:7077
        cluster.hosts["bk1"].processes["bookie"].pause()    # SIGSTOP its process group
        cluster.run_on("driver", [...])                     # a command on the driver host

``start()`` makes the network (``network.Network``), then starts ZooKeeper,
the bookies, the Spark master and the workers, each waited for (bounded), and
writes ``cluster.json`` (``describe()``: hosts, namespaces, addresses, zones,
pids, logs, URIs) into the run's directory. ``stop()`` stops every process it
started (process groups: SIGTERM, then SIGKILL), kills whatever else still
runs in its namespaces and deletes them. ``stop()`` runs on every path: the
context manager, a failure during ``start()`` and, as a last resort, atexit.
``on_step(name)`` is called after each step of ``start()`` (tests make it
raise to check that a failure half-way leaves nothing behind).
"""
from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from pyspark_ledger.errors import ClusterError
from pyspark_ledger.testing.cluster import netns, services
from pyspark_ledger.testing.cluster.network import Host, Network
from pyspark_ledger.testing.cluster.spec import ClusterSpec

CHROOT = "/ledger"
ZK_SESSION_TIMEOUT_S = 10
START_TIMEOUT_S = 240.0   # per service; the machine is shared, JVMs start slowly under load
#: The Spark driver's CPU priority in tests and ``demo``: Spark waits a fixed 10 s for each Python process it starts
#: on the driver (a streaming source, a sink's commit) to connect back, and on a shared machine under load a
#: Python start at normal priority takes longer (measured: 7 s at load 25 on 2 cores, 3 s at nice -5, and
#: at nice -5 the demo still missed it three times in a row).
DRIVER_NICE = -10
STEPS = ("network", "zookeeper", "bookies", "spark-master", "spark-workers")   # what on_step is called with


class NetnsCluster:
    """The cluster of ``spec`` (see the module docstring)."""

    def __init__(self, spec: ClusterSpec, base_dir: str | Path | None = None, *,
                 on_step: Callable[[str], None] | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 keep_dir: bool = False) -> None:
        self.spec = spec
        self._owned_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir else None
        self.keep_dir = keep_dir
        self.network = Network([host.name for host in spec.hosts])
        self.on_step = on_step or (lambda step: None)
        self.start_timeout_s = start_timeout_s
        self.hosts: dict[str, Host] = {}
        self.metadata_uri = ""
        self.master_url = ""
        self.zookeeper_connect = ""

    @property
    def prefix(self) -> str:
        return self.network.prefix

    @property
    def cluster_file(self) -> Path:
        return self.base_dir / "cluster.json"

    def with_role(self, role: str) -> list[Host]:
        return [self.hosts[host.name] for host in self.spec.with_role(role)]

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> "NetnsCluster":
        atexit.register(self.stop)
        try:
            if self.base_dir is None:
                self.base_dir = Path(tempfile.mkdtemp(prefix=f"netns-cluster-{self.prefix}-"))
            self.base_dir.mkdir(parents=True, exist_ok=True)
            self.network.up()
            for host_spec in self.spec.hosts:
                host = self.network.hosts[host_spec.name]
                host.zone, host.rack, host.roles = host_spec.zone, host_spec.rack, host_spec.roles
                self.hosts[host.name] = host
            self._step("network")
            self._start_zookeeper()
            self._step("zookeeper")
            self._start_bookies()
            self._step("bookies")
            self._start_spark()
            self.write_cluster_file()
        except BaseException:
            self.keep_dir = True   # the logs say why
            self.stop()
            raise
        return self

    def _step(self, name: str) -> None:
        self.write_cluster_file()
        self.on_step(name)

    def _start_zookeeper(self) -> None:
        zookeepers = self.with_role("zookeeper")
        if not zookeepers:
            return
        services.zookeeper_ensemble(zookeepers, self.base_dir, self.spec.zookeeper_heap, self.start_timeout_s)
        self.zookeeper_connect = services.zookeeper_connect_string(zookeepers)
        self.metadata_uri = f"zk://{self.zookeeper_connect}{CHROOT}?session_timeout={ZK_SESSION_TIMEOUT_S}"

    def _start_bookies(self) -> None:
        bookies = self.with_role("bookie")
        if bookies and not self.metadata_uri:
            raise ClusterError("bookies need ZooKeeper: give the spec at least one zookeeper host")
        for index, host in enumerate(bookies):
            services.bookie(host, self.base_dir, self.metadata_uri, self.spec.bookie_flags)
            if index == 0:   # the first one creates the metadata layout; the others start together
                services.wait_bookie(host, self.start_timeout_s)
        for host in bookies[1:]:
            services.wait_bookie(host, self.start_timeout_s)

    def _start_spark(self) -> None:
        masters = self.with_role("spark-master")
        if not masters:
            return
        master = masters[0]
        services.spark_master(master, self.base_dir, self.start_timeout_s)
        self.master_url = f"spark://{master.address}:{services.SPARK_MASTER_PORT}"
        self._step("spark-master")
        workers = self.with_role("spark-worker")
        for host in workers:
            services.spark_worker(host, self.base_dir, self.master_url, self.spec.spark_worker_cores,
                                  self.spec.spark_worker_memory)
        for host in workers:
            services.wait_worker(host, self.start_timeout_s)
        self._step("spark-workers")

    def stop(self) -> list[str]:
        """Stop everything (idempotent; see the module docstring); raises ClusterError if something stayed."""
        atexit.unregister(self.stop)
        processes = [process for host in self.hosts.values() for process in host.processes.values()]
        problems = []
        for process in processes:
            process.signal_group(15)    # SIGTERM to all first: they stop together
        for process in processes:
            try:
                process.stop(grace_s=3.0)
            except ClusterError as exc:
                problems.append(str(exc))
        problems += self.network.down()
        if self.base_dir is not None and self._owned_dir and not self.keep_dir and not problems:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if problems:
            raise ClusterError("the cluster was not removed completely: " + "; ".join(problems))
        return problems

    def __enter__(self) -> "NetnsCluster":
        return self.start()

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is not None:
            self.keep_dir = True
        self.stop()

    # --- use --------------------------------------------------------------------------------------------
    def spark_conf(self, driver: str = "driver") -> dict[str, str]:
        """The Spark settings a driver on host ``driver`` needs for this cluster."""
        address = self.hosts[driver].address
        return {"spark.master": self.master_url, "spark.driver.host": address, "spark.driver.bindAddress": address,
                "spark.executor.memory": self.spec.spark_executor_memory,
                "spark.executor.cores": str(self.spec.spark_worker_cores),
                "spark.cores.max": str(self.spec.spark_worker_cores * len(self.with_role("spark-worker"))),
                # the executors run this interpreter with this checkout importable (a deployment installs the
                # package on every worker host instead)
                "spark.pyspark.python": sys.executable,
                "spark.executorEnv.PYTHONPATH": str(services.repo_root())}

    def driver_command(self, args: Sequence[str], driver: str = "driver", nice: int = 0) -> list[str]:
        """``ip netns exec <driver ns> [nice -n NICE] python -m pyspark_ledger.cli.main ARGS``: a ``ledger``
        command on the driver host, running this checkout (see ``DRIVER_NICE`` for ``nice``)."""
        niceness = ["nice", "-n", str(nice)] if nice else []
        return ["ip", "netns", "exec", self.hosts[driver].netns, *niceness, sys.executable, "-m",
                "pyspark_ledger.cli.main", *args]

    def describe(self) -> dict:
        return {"prefix": self.prefix, "subnet": str(self.network.subnet), "switch_netns": self.network.switch,
                "base_dir": str(self.base_dir), "metadata_uri": self.metadata_uri, "master_url": self.master_url,
                "zookeeper_connect": self.zookeeper_connect,
                "spark_conf": self.spark_conf() if self.master_url and "driver" in self.hosts else {},
                "python": sys.executable, "pythonpath": str(services.repo_root()),
                "hosts": [host.to_dict() for host in self.hosts.values()]}

    def write_cluster_file(self) -> Path:
        path = self.cluster_file
        path.write_text(json.dumps(self.describe(), indent=2) + "\n")
        return path

    def run_on(self, host: str, command: Sequence[str], timeout_s: float = 60.0, **popen) -> subprocess.CompletedProcess:
        """Run ``command`` on ``host`` to completion (output captured; ``popen`` goes to subprocess.run)."""
        return subprocess.run(["ip", "netns", "exec", self.hosts[host].netns, *command], capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, **popen)

    def reachable(self, source: str, target: str, port: int, timeout_s: float = 2.0) -> bool:
        """True if a TCP connection from host ``source`` to ``target:port`` succeeds now."""
        try:
            netns.connect_in(self.hosts[source].netns, self.hosts[target].address, port, timeout_s).close()
            return True
        except OSError:
            return False

