"""The services of the test cluster, each a ``HostProcess`` on its host: ZooKeeper, bookies, Spark.

- ``zookeeper_ensemble``: one ``QuorumPeerMain`` per zookeeper host, every
  zoo.cfg listing all of them (``server.N=ADDR:2888:3888``), client port 2181
  on the host's address; ready once every server reports ``Mode: leader`` or
  ``Mode: follower`` (asked from inside its namespace).
- ``bookie``: ``python -m bookie_server --host ADDR`` (so its id and the address
  it registers are the host's reachable address), port 3181, the ensemble's
  ``zk://`` URI; ``--zone`` when the bookie server has that flag.
- ``spark_master`` / ``spark_worker``: ``spark-class`` of the installed PySpark,
  bound to the host's address (``--host`` and ``SPARK_LOCAL_IP``); a worker
  offers ``spark_worker_cores`` and ``spark_worker_memory`` and runs executors
  with this interpreter and this checkout on ``PYTHONPATH``.

Every port is fixed: each host has an address of its own.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark_ledger.errors import ClusterError
from pyspark_ledger.testing.bookies import READY_MARK, child_env
from pyspark_ledger.testing.cluster import netns
from pyspark_ledger.testing.cluster.network import Host
from pyspark_ledger.testing.cluster.processes import HostProcess
from pyspark_ledger.testing.zookeeper import LOGGING_JAR, ZOOKEEPER_JAR

ZK_CLIENT_PORT = 2181
ZK_PEER_PORT = 2888
ZK_ELECTION_PORT = 3888
ZK_TICK_MS = 500
ZK_INIT_LIMIT = 40   # ticks a new leader waits for a quorum of followers to connect and sync (20 s)
ZK_SYNC_LIMIT = 20   # ticks a follower may lag before the leader drops it (10 s)
BOOKIE_PORT = 3181
BOOKIE_METRICS_PORT = 8000
SPARK_MASTER_PORT = 7077
SPARK_MASTER_UI_PORT = 8080
SPARK_WORKER_UI_PORT = 8081
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
MODES = ("Mode: leader", "Mode: follower")
# each server's log (zookeeper.log in its data dir) tells how its elections went, with times: the quorum
# package (election, connections between servers, leader and learner phases) logs at info
ELECTION_LOGGING = ("-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.quorum=info",
                    "-Dorg.slf4j.simpleLogger.showDateTime=true",
                    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")


def zookeeper_connect_string(hosts: list[Host]) -> str:
    return ",".join(f"{host.address}:{ZK_CLIENT_PORT}" for host in hosts)


def zookeeper_ensemble(hosts: list[Host], base: Path, heap: str, timeout_s: float) -> list[HostProcess]:
    """Start the ensemble and wait (bounded) until it has a leader and every server serves."""
    started = []
    servers = [f"server.{index + 1}={host.address}:{ZK_PEER_PORT}:{ZK_ELECTION_PORT}"
               for index, host in enumerate(hosts)]
    for index, host in enumerate(hosts):
        home = base / host.name / "zookeeper"
        (home / "data").mkdir(parents=True, exist_ok=True)
        (home / "data" / "myid").write_text(f"{index + 1}\n")
        config = [f"dataDir={home / 'data'}", f"clientPort={ZK_CLIENT_PORT}", f"clientPortAddress={host.address}",
                  f"tickTime={ZK_TICK_MS}", f"initLimit={ZK_INIT_LIMIT}", f"syncLimit={ZK_SYNC_LIMIT}", "minSessionTimeout=1000",
                  "maxSessionTimeout=60000", "admin.enableServer=false", "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                  "maxClientCnxns=0", *servers]
        (home / "zoo.cfg").write_text("\n".join(config) + "\n")
        process = HostProcess("zookeeper", host.netns,
                              ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
                               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", *ELECTION_LOGGING,
                               "-cp", f"{ZOOKEEPER_JAR}:{LOGGING_JAR}", QUORUM_MAIN, str(home / "zoo.cfg")],
                              home / "zookeeper.log", cwd=home)
        host.processes["zookeeper"] = process
        started.append(process.start())
    deadline = time.monotonic() + timeout_s
    waiting = list(hosts)
    while waiting:
        for host in list(waiting):
            process = host.processes["zookeeper"]
            if not process.running():
                raise ClusterError(f"ZooKeeper on {host.name} exited with status {process.returncode()}; its log "
                                   f"{process.log_path} ends with:\n{process.log_tail()}")
            answer = netns.four_letter_word(host.netns, host.address, ZK_CLIENT_PORT, "srvr")
            if any(mode in answer for mode in MODES):
                waiting.remove(host)
        if waiting and time.monotonic() >= deadline:
            raise ClusterError(f"the ZooKeeper ensemble did not form within {timeout_s:.0f} s: "
                               f"{', '.join(host.name for host in waiting)} not serving; see "
                               f"{waiting[0].processes['zookeeper'].log_path}")
        time.sleep(0.3)
    return started


def bookie_supports(flag: str) -> bool:
    """True if this checkout's bookie server has ``flag`` (e.g. ``--zone``, added by another part of issue 17)."""
    from bookie_server.config import build_parser

    return flag in build_parser()._option_string_actions


def bookie(host: Host, base: Path, metadata_uri: str, extra_flags: dict) -> HostProcess:
    """Start (not wait for) a bookie on ``host``; ``wait_bookie`` waits for its ready line."""
    home = base / host.name / "bookie"
    args = ["--data-dir", str(home / "data"), "--port", str(BOOKIE_PORT), "--metadata", metadata_uri,
            "--host", host.address, "--metrics-port", str(BOOKIE_METRICS_PORT), "--shutdown-grace", "1"]
    for flag, value in (("--zone", host.zone), ("--rack", host.rack)):
        if value and bookie_supports(flag):
            args += [flag, value]
    for name, value in extra_flags.items():
        args += [f"--{name.replace('_', '-')}", *(() if value is True else (str(value),))]
    process = HostProcess("bookie", host.netns, [sys.executable, "-m", "bookie_server", *args],
                          home / "bookie.log", env=child_env(), cwd=repo_root(),
                          info={"bookie_id": f"{host.address}:{BOOKIE_PORT}", "port": BOOKIE_PORT,
                                "data_dir": str(home / "data")})
    host.processes["bookie"] = process
    return process.start()


def wait_bookie(host: Host, timeout_s: float) -> None:
    host.processes["bookie"].wait_for_line(READY_MARK, timeout_s)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(host: Host, base: Path) -> dict[str, str]:
    """The environment of a Spark daemon on ``host``: bound to its address, executors running this Python and
    importing this checkout."""
    env = child_env({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": host.address,
                     "SPARK_LOCAL_HOSTNAME": host.address, "SPARK_DAEMON_MEMORY": "512m",
                     "SPARK_LOG_DIR": str(base / host.name / "spark-logs"),
                     "SPARK_DAEMON_JAVA_OPTS": "-Djava.net.preferIPv4Stack=true -XX:+UseSerialGC",
                     "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"})
    env.pop("SPARK_CONF_DIR", None)
    return env


def spark_master(host: Host, base: Path, timeout_s: float) -> HostProcess:
    home = base / host.name / "spark-master"
    process = HostProcess("spark-master", host.netns,
                          [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                           "--host", host.address, "--port", str(SPARK_MASTER_PORT),
                           "--webui-port", str(SPARK_MASTER_UI_PORT)],
                          home / "master.log", env=spark_env(host, base), cwd=_mkdir(home))
    host.processes["spark-master"] = process
    process.start().wait_for_line("I have been elected leader", timeout_s)
    return process


def spark_worker(host: Host, base: Path, master_url: str, cores: int, memory: str) -> HostProcess:
    """Start (not wait for) a worker; ``wait_worker`` waits until the master has registered it."""
    home = base / host.name / "spark-worker"
    process = HostProcess("spark-worker", host.netns,
                          [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                           master_url, "--host", host.address, "--cores", str(cores), "--memory", memory,
                           "--work-dir", str(_mkdir(home / "work")), "--webui-port", str(SPARK_WORKER_UI_PORT)],
                          home / "worker.log", env=spark_env(host, base), cwd=home)
    host.processes["spark-worker"] = process
    return process.start()


def wait_worker(host: Host, timeout_s: float) -> None:
    host.processes["spark-worker"].wait_for_line("Successfully registered with master", timeout_s)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_root() -> Path:
    """The checkout whose code the cluster's processes run (on their PYTHONPATH)."""
    import bookie_server

    return Path(bookie_server.__file__).resolve().parent.parent
