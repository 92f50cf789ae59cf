"""The namespace cluster's hosts as the faults API sees them (``faults.hosts.Host``), from its cluster file.

A fault run works from the file ``NetnsCluster`` writes (``cluster.json``), not from the ``NetnsCluster``
object: the run itself must sit on the driver host (``ip netns exec <driver ns>``) to reach anything, so
it is another process than the one that started the cluster. Processes share this machine's pid space,
so signals reach them by pid:

- ``ProcessHost``: the one service (``bookie`` or ``zookeeper``) of a cluster host. ``pause``/``resume``
  SIGSTOP/SIGCONT its process group; ``kill`` is SIGKILL to the group, waited for until the process is
  gone (a zombie of the cluster's owner counts as gone); ``restart`` starts the same command again in the
  same namespace with the same data (a ``HostProcess`` of this process) and waits until it serves (a
  bookie's ready line; a ZooKeeper server answering ``srvr`` as leader or follower). What it restarts is
  removed with the namespaces when the cluster stops.
- ``ZooKeeperLeaderHost`` (``zk-leader``): whichever server of the ensemble leads when the fault starts,
  found by the ``srvr`` four-letter word (the cluster's zoo.cfg whitelists it) asked of every server;
  the fault and its heal act on that server. After a kill, ``elections_s`` gets the seconds until
  a server answered as leader again and ``successors`` which one (measured by a thread, so the schedule goes on meanwhile).
  The heal restarts the killed server only once another one leads, or after ``ELECTION_WAIT_S`` (ZooKeeper's
  own limit for a new leader to gather its quorum, initLimit x tickTime, plus 10 s): otherwise, under load, the
  killed server's restart races the survivors' election, and a restart that wins it (it rejoins an ensemble
  still electing, and with the highest id or the latest zxid it is elected again) says nothing about whether
  two of three servers elect.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from pyspark_ledger.errors import ClusterError, InvalidStateError
from pyspark_ledger.testing.bookies import READY_MARK, child_env
from pyspark_ledger.testing.cluster import netns, services
from pyspark_ledger.testing.cluster.processes import HostProcess
from pyspark_ledger.testing.faults.hosts import Host

KILL_WAIT_S = 20.0
RESTART_TIMEOUT_S = 180.0
ELECTION_TIMEOUT_S = 120.0
ELECTION_WAIT_S = services.ZK_INIT_LIMIT * services.ZK_TICK_MS / 1000 + 10.0
LEADER = "Mode: leader"
SERVING = ("Mode: leader", "Mode: follower")
PORTS = {"bookie": services.BOOKIE_PORT, "zookeeper": services.ZK_CLIENT_PORT}


def alive(pid: int | None) -> bool:
    """True if ``pid`` runs (a zombie does not)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class ProcessHost(Host):
    """One service of a cluster host, described by its entry in the cluster file (see the module docstring)."""

    def __init__(self, entry: dict, role: str) -> None:
        if role not in PORTS or role not in entry.get("processes", {}):
            raise InvalidStateError(f"host {entry.get('name')!r} runs no {role} (it runs "
                                    f"{sorted(entry.get('processes', {}))}); fault hosts are bookies and ZooKeeper")
        self.name = entry["name"]
        self.role = role
        self.netns = entry["netns"]
        self.host_address = entry["address"]
        described = entry["processes"][role]
        self.command = list(described["command"])
        self.log_path = Path(described["log"])
        self.pgid = int(described["pgid"])
        self.restarted: HostProcess | None = None

    @property
    def address(self) -> str:
        return f"{self.host_address}:{PORTS[self.role]}"

    @property
    def pid(self) -> int:
        return self.restarted.pid if self.restarted is not None else self.pgid

    def pids(self) -> list[int]:
        return [self.pid] if alive(self.pid) else []

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self.restarted is not None:
            self.restarted.kill()          # our child: reaped here
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while alive(self.pid):
            if time.monotonic() >= deadline:
                raise ClusterError(f"{self.role} on {self.name} (pid {self.pid}) survived SIGKILL for "
                                   f"{KILL_WAIT_S:.0f} s")
            time.sleep(0.05)

    def restart(self) -> None:
        if self.pids():
            self.resume()
            return
        if self.role == "bookie":
            process = HostProcess("bookie", self.netns, self.command, self.log_path, env=child_env(),
                                  cwd=services.repo_root())
            self.restarted = process.start()
            process.wait_for_line(READY_MARK, RESTART_TIMEOUT_S)
        else:
            process = HostProcess("zookeeper", self.netns, self.command, self.log_path, cwd=self.log_path.parent)
            self.restarted = process.start()
            self.wait_serving(RESTART_TIMEOUT_S)

    def mode(self) -> str:
        """A ZooKeeper server's ``srvr`` answer ('' when it does not answer)."""
        return netns.four_letter_word(self.netns, self.host_address, services.ZK_CLIENT_PORT, "srvr")

    def wait_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(mode in self.mode() for mode in SERVING):
            if not self.pids():
                raise ClusterError(f"ZooKeeper on {self.name} exited after its restart; see {self.log_path}")
            if time.monotonic() >= deadline:
                raise ClusterError(f"ZooKeeper on {self.name} did not serve within {timeout_s:.0f} s of its restart")
            time.sleep(0.2)


class ZooKeeperLeaderHost(Host):
    """The ensemble's current leader (see the module docstring)."""

    role = "zookeeper"

    def __init__(self, servers: list[ProcessHost], name: str = "zk-leader") -> None:
        if not servers:
            raise InvalidStateError("the cluster has no ZooKeeper servers: there is no leader to lose")
        self.name = name
        self.servers = servers
        self.current: ProcessHost | None = None
        self.history: list[str] = []     # the servers that led when a fault began, in order
        self.elections_s: list[float] = []   # after each kill: seconds until a server led again
        self.successors: list[str] = []      # ... and which one ("" if none within ELECTION_TIMEOUT_S)
        self._elected = threading.Event()    # clear from a kill until the election after it is decided
        self._elected.set()

    @property
    def address(self) -> str:
        return ",".join(server.address for server in self.servers)

    def leader(self, timeout_s: float = 30.0) -> ProcessHost:
        """The server that answers ``srvr`` with ``Mode: leader`` (waits, bounded, through an election)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for server in self.servers:
                if LEADER in server.mode():
                    return server
            if time.monotonic() >= deadline:
                raise ClusterError(f"no ZooKeeper server of {[s.name for s in self.servers]} leads "
                                   f"(none answered srvr with {LEADER!r} within {timeout_s:.0f} s)")
            time.sleep(0.2)

    def _take(self) -> ProcessHost:
        self.current = self.leader()
        self.history.append(self.current.name)
        return self.current

    def pids(self) -> list[int]:
        return self.current.pids() if self.current is not None else []

    def pause(self) -> None:
        self._take().pause()

    def resume(self) -> None:
        if self.current is not None:
            self.current.resume()

    def kill(self) -> None:
        """SIGKILL the leader; a thread measures how long until another server leads (``elections_s``)."""
        killed = time.monotonic()
        self._elected.clear()
        self._take().kill()
        threading.Thread(target=self._time_election, args=(killed,), daemon=True).start()

    def _time_election(self, killed: float) -> None:
        try:
            self.successors.append(self.leader(timeout_s=ELECTION_TIMEOUT_S).name)
            self.elections_s.append(round(time.monotonic() - killed, 2))
        except ClusterError:
            self.successors.append("")
            self.elections_s.append(float("inf"))
        finally:
            self._elected.set()

    def restart(self) -> None:
        """Restart the killed leader, once another server leads (or ``ELECTION_WAIT_S`` passed)."""
        if self.current is not None:
            if not self.current.pids():
                self._elected.wait(ELECTION_WAIT_S)
            self.current.restart()
