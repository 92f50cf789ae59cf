"""``ledger demo --cluster FILE``: the demo against a running cluster instead of its own sandbox.

``FILE`` is a cluster file as ``pyspark_ledger.testing.cluster`` writes it
(``cluster.json``); a real deployment can write one by hand. What the demo reads
from it::

    {"metadata_uri": "zk://10.0.0.11:2181,10.0.0.12:2181/ledger",    # required: ZooKeeper
     "spark_conf": {"spark.master": "spark://10.0.0.19:7077",         # required: the cluster's master
                    "spark.driver.host": "10.0.0.22", ...},           # this host's address, reachable by executors
     "hosts": [{"name": "bk1", "address": "10.0.0.14", "zone": "zone-a",
                "processes": {"bookie": {"bookie_id": "10.0.0.14:3181", "pid": 1234}}}, ...]}
                                                        # optional: bookies the demo may kill -9 (same machine)

``load_target(path)`` checks it (``InvalidConfigurationError`` naming the
field): a ``sqlite:///`` metadata URI is refused, since executors on other hosts
cannot open a file of the driver's host; ``spark.driver.host`` must be an
address of this host (run the demo on the driver host: ``ip netns exec
<driver namespace> ledger demo --cluster FILE``). ``ClusterTarget`` then stands
in for the sandbox: ``bookies`` (id, pid, liveness from /proc) and
``kill_bookie(index)`` (SIGKILL to the bookie's process group; the cluster's
owner reaps it), ``pause_bookie`` / ``resume_bookie`` (SIGSTOP / SIGCONT, the
demo's way to make its kill certain to land on unacknowledged adds).
"""
from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.errors import InvalidConfigurationError, InvalidStateError
from pyspark_ledger.testing.bookies import STOP_WAIT_S, wait_stopped

MAX_FILE_BYTES = 1 << 20


@dataclass
class RemoteBookie:
    """A bookie process of the cluster, seen from the driver: same machine, so its pid can be signalled."""

    bookie_id: str
    pid: int | None
    data_dir: Path
    returncode: int | None = None

    def is_running(self) -> bool:
        if self.pid is None:
            return True   # not ours to watch: assume it runs
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False


class ClusterTarget:
    """The cluster of a cluster file, in the sandbox's place (see the module docstring)."""

    def __init__(self, metadata_uri: str, spark_conf: dict[str, str], bookies: list[RemoteBookie]) -> None:
        self.metadata_uri = metadata_uri
        self.spark_conf = spark_conf
        self.bookies = bookies
        self.data_dir = None
        self.repair_key_file = None
        self._reported: set[int] = set()
        self._killed: set[int] = set()

    def kill_bookie(self, index: int) -> None:
        self._signal(index, signal.SIGKILL)
        self._killed.add(index)
        self.bookies[index].returncode = -signal.SIGKILL

    def pause_bookie(self, index: int) -> None:
        """SIGSTOP to the bookie's process group, returning once every thread of the bookie has stopped
        (``resume_bookie`` sends SIGCONT)."""
        self._signal(index, signal.SIGSTOP)
        bookie = self.bookies[index]
        if not wait_stopped(bookie.pid):
            raise InvalidStateError(f"bookie {bookie.bookie_id} (pid {bookie.pid}) did not stop within "
                                    f"{STOP_WAIT_S:g} s of SIGSTOP")

    def resume_bookie(self, index: int) -> None:
        self._signal(index, signal.SIGCONT)

    def _signal(self, index: int, signum: int) -> None:
        bookie = self.bookies[index]
        if bookie.pid is None:
            raise InvalidConfigurationError(f"the cluster file gives no pid for bookie {bookie.bookie_id}: "
                                            "it cannot be killed from here (use --no-kill)")
        try:
            os.killpg(bookie.pid, signum)
        except ProcessLookupError:
            pass

    def poll_exits(self) -> list[tuple[int, RemoteBookie]]:
        died = []
        for index, bookie in enumerate(self.bookies):
            if index not in self._killed and index not in self._reported and not bookie.is_running():
                self._reported.add(index)
                died.append((index, bookie))
        return died

    def stop(self) -> None:
        """Nothing to stop: the cluster belongs to whoever started it."""


def load_target(path: str | os.PathLike) -> ClusterTarget:
    """Read and check a cluster file (see the module docstring)."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise InvalidConfigurationError(f"--cluster {file}: larger than {MAX_FILE_BYTES} bytes")
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidConfigurationError(f"--cluster {file}: cannot read a cluster file: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidConfigurationError(f"--cluster {file}: expected a JSON object")
    uri = data.get("metadata_uri")
    if not isinstance(uri, str) or not uri.startswith("zk://"):
        raise InvalidConfigurationError(
            f"--cluster {file}: metadata_uri must be a ZooKeeper URI (zk://host:port,.../chroot), got {uri!r}: "
            "Spark executors on other hosts cannot open a sqlite:/// file of the driver's host")
    conf = data.get("spark_conf")
    if not isinstance(conf, dict) or not str(conf.get("spark.master", "")).startswith("spark://"):
        raise InvalidConfigurationError(f"--cluster {file}: spark_conf must name the cluster's master "
                                        "(spark.master = spark://host:7077)")
    driver = conf.get("spark.driver.host")
    if not isinstance(driver, str) or driver not in local_addresses():
        raise InvalidConfigurationError(
            f"--cluster {file}: spark.driver.host {driver!r} is not an address of this host "
            f"({', '.join(sorted(local_addresses())) or 'none'}): executors connect back to the driver there. Run "
            "the demo on the driver host (for the test cluster: ip netns exec <prefix>-driver ledger demo --cluster "
            "FILE), or set spark.driver.host to this host's address")
    return ClusterTarget(uri, {str(key): str(value) for key, value in conf.items()}, _bookies(data))


def _bookies(data: dict) -> list[RemoteBookie]:
    found = []
    for host in data.get("hosts") or []:
        process = ((host or {}).get("processes") or {}).get("bookie")
        if not isinstance(process, dict):
            continue
        pid, bookie_id = process.get("pid"), process.get("bookie_id")
        if not isinstance(bookie_id, str):
            raise InvalidConfigurationError(f"--cluster: the bookie of host {host.get('name')!r} has no bookie_id")
        found.append(RemoteBookie(bookie_id, pid if isinstance(pid, int) else None,
                                  Path(str(process.get("data_dir", process.get("log", "."))))))
    return found


def local_addresses() -> set[str]:
    """The IPv4 addresses of this host's network interfaces (of this network namespace)."""
    addresses = set()
    with open("/proc/net/fib_trie") as handle:   # every local address is listed as "/32 host LOCAL"
        lines = handle.read().splitlines()
    for previous, line in zip(lines, lines[1:]):
        if "/32 host LOCAL" in line:
            addresses.add(previous.split()[-1])
    addresses.discard("")
    return addresses or {socket.gethostbyname(socket.gethostname())}
