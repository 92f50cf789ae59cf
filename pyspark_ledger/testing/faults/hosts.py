"""Hosts and the network between them, as fault actions see them; the local implementation.

A ``Host`` has a name, a role (``bookie``, ``zookeeper``, ``writer``), the address others reach it at,
and the pids of its processes; it can be paused (SIGSTOP), resumed (SIGCONT), killed (SIGKILL) and
restarted, and a bookie's disk can be filled and freed. A ``Network`` cuts and slows the traffic of a
host: ``isolate(host, direction)`` (``both``: a partition, ``in``: nothing reaches the host, ``out``:
nothing it sends arrives), ``delay``, ``loss`` (as stalls and resets), ``reset`` (cut its connections)
and ``heal``.

Locally every host is on 127.0.0.1 and each server host sits behind its own ``FaultProxy``
(``ProxyNetwork``): its clients are given the proxy's address, so a fault cuts the host from every
client at once (finer partitions, host from host, are for the network-namespace cluster, which
implements ``Network`` with its own means). A bookie behind a proxy registers with its proxy's address
as its id, and clients open the metadata store through ``AdvertisedStore``, which gives them that
address for it (a registration names the address the bookie listens on).
"""
from __future__ import annotations

import abc
import os
import signal
from pathlib import Path
from typing import Callable, Mapping

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError
from pyspark_ledger.metadata.store import BookieRegistration, MetadataStore, Watch
from pyspark_ledger.testing.faults.proxy import DOWN, UP, FaultProxy
from pyspark_ledger.testing.metadata_hooks import HookedStore

ISOLATE_DIRECTIONS = {"both": "both", "in": UP, "out": DOWN}
DISK_FULL = "0.99"
DISK_OK = "0.10"


class Host(abc.ABC):
    """One host of a test cluster (see the module docstring)."""

    name: str
    role: str

    @property
    @abc.abstractmethod
    def address(self) -> str: ...

    @abc.abstractmethod
    def pids(self) -> list[int]: ...

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    @abc.abstractmethod
    def kill(self) -> None: ...

    @abc.abstractmethod
    def restart(self) -> None: ...

    def fill_disk(self) -> None:
        raise InvalidStateError(f"host {self.name} ({self.role}) has no disk to fill")

    def free_disk(self) -> None:
        raise InvalidStateError(f"host {self.name} ({self.role}) has no disk to free")

    def __repr__(self) -> str:
        return f"<{self.role} {self.name} at {self.address} pids {self.pids()}>"


class Network(abc.ABC):
    """Cuts and slows the traffic of hosts (see the module docstring)."""

    @abc.abstractmethod
    def isolate(self, host: Host, direction: str = "both") -> None: ...

    @abc.abstractmethod
    def delay(self, host: Host, fixed_s: float, jitter_s: float = 0.0) -> None: ...

    @abc.abstractmethod
    def loss(self, host: Host, probability: float, hold_s: float, reset_probability: float = 0.0) -> None: ...

    @abc.abstractmethod
    def reset(self, host: Host) -> None: ...

    @abc.abstractmethod
    def heal(self, host: Host | None = None) -> None: ...

    def partition(self, side_a, side_b, direction: str = "both"):
        """Cut the hosts named in ``side_a`` from those in ``side_b`` only; returns what ``restore`` takes.
        Only networks that cut host from host offer it (the namespace cluster's ``NetnsNetwork``)."""
        raise InvalidStateError(f"{type(self).__name__} cuts a host from every client at once; a partition "
                                "between chosen hosts needs the namespace cluster")

    def restore(self, cut) -> None:
        raise InvalidStateError(f"{type(self).__name__} has no partitions between chosen hosts")


class ProxyNetwork(Network):
    """The local network: one FaultProxy per server host, keyed by host name."""

    def __init__(self) -> None:
        self.proxies: dict[str, FaultProxy] = {}

    def add(self, name: str, proxy: FaultProxy) -> None:
        if name in self.proxies:
            raise InvalidArgumentError(f"host {name} already has a proxy")
        self.proxies[name] = proxy

    def _proxy(self, host: Host) -> FaultProxy:
        proxy = self.proxies.get(host.name)
        if proxy is None:
            raise InvalidArgumentError(f"host {host.name} has no proxy in front of it: its traffic cannot be cut")
        return proxy

    def isolate(self, host: Host, direction: str = "both") -> None:
        if direction not in ISOLATE_DIRECTIONS:
            raise InvalidArgumentError(f"direction must be one of {sorted(ISOLATE_DIRECTIONS)}, got {direction!r}")
        self._proxy(host).block(ISOLATE_DIRECTIONS[direction])

    def delay(self, host: Host, fixed_s: float, jitter_s: float = 0.0) -> None:
        self._proxy(host).delay("both", fixed_s, jitter_s)

    def loss(self, host: Host, probability: float, hold_s: float, reset_probability: float = 0.0) -> None:
        self._proxy(host).loss("both", probability, hold_s, reset_probability)

    def reset(self, host: Host) -> None:
        self._proxy(host).reset_all()

    def heal(self, host: Host | None = None) -> None:
        for name, proxy in self.proxies.items():
            if host is None or host.name == name:
                proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()


class LocalBookieHost(Host):
    """A ``BookieProcess`` behind a proxy; its disk usage is read from ``usage_file`` (see
    ``bookie_server.disk_monitor``'s override), so filling the disk is writing 0.99 there."""

    role = "bookie"

    def __init__(self, name: str, bookie, proxy: FaultProxy, usage_file: Path) -> None:
        self.name = name
        self.bookie = bookie
        self.proxy = proxy
        self.usage_file = Path(usage_file)

    @property
    def address(self) -> str:
        return self.proxy.address

    @property
    def bookie_id(self) -> str:
        return self.bookie.bookie_id

    def pids(self) -> list[int]:
        return [self.bookie.pid] if self.bookie.is_running() else []

    def kill(self) -> None:
        self.bookie.kill()

    def restart(self) -> None:
        if self.bookie.is_running():
            self.resume()
            return
        self.bookie.start()

    def fill_disk(self) -> None:
        self.usage_file.write_text(DISK_FULL)

    def free_disk(self) -> None:
        self.usage_file.write_text(DISK_OK)


class LocalZooKeeperHost(Host):
    """A ``ZooKeeperServer`` on 127.0.0.1 (restart reuses its port and data)."""

    role = "zookeeper"

    def __init__(self, name: str, server) -> None:
        self.name = name
        self.server = server

    @property
    def address(self) -> str:
        return self.server.connect_string

    def pids(self) -> list[int]:
        process = getattr(self.server, "_process", None)
        return [process.pid] if process is not None and process.poll() is None else []

    def kill(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        if self.pids():
            self.resume()
            return
        self.server.start()


class LocalProcessHost(Host):
    """A process of ours (a writer subprocess: a ``subprocess.Popen``); restart is not offered."""

    role = "writer"

    def __init__(self, name: str, process) -> None:
        self.name = name
        self.process = process

    @property
    def address(self) -> str:
        return "127.0.0.1"

    def pids(self) -> list[int]:
        return [self.process.pid] if self.process.poll() is None else []

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        raise InvalidStateError(f"writer {self.name} cannot be restarted; start a new one")


class AdvertisedStore(HookedStore):
    """A metadata store whose bookie registrations give each bookie of ``addresses`` (id -> address) that
    address; everything else is forwarded (and every ledger version written through it is recorded,
    ``HookedStore.history``)."""

    def __init__(self, inner: MetadataStore, addresses: Mapping[str, str]) -> None:
        super().__init__(inner)
        self.addresses = dict(addresses)

    def _advertise(self, registration: BookieRegistration) -> BookieRegistration:
        address = self.addresses.get(registration.bookie_id)
        if address is None:
            return registration
        host, _, port = address.rpartition(":")
        info = {**(registration.info or {}), "host": host, "port": int(port)}
        return BookieRegistration(registration.bookie_id, registration.read_only, info)

    def bookies(self, include_read_only: bool = True) -> dict[str, BookieRegistration]:
        return {bookie_id: self._advertise(registration)
                for bookie_id, registration in self.inner.bookies(include_read_only).items()}

    def watch_bookies(self, callback: Callable[[dict[str, BookieRegistration]], None]) -> Watch:
        return self.inner.watch_bookies(
            lambda registered: callback({key: self._advertise(value) for key, value in registered.items()}))

    def read_ledger_latest(self, ledger_id: int):
        return self.inner.read_ledger_latest(ledger_id)

