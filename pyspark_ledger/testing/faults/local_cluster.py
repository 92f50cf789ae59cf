"""A one-machine cluster for fault schedules: bookies on 127.0.0.1, each behind its own ``FaultProxy``.

``LocalFaultCluster(base_dir, bookies=5, metadata="sqlite")`` starts the metadata store (an SQLite file,
or a real ZooKeeper server with ``metadata="zookeeper"``), then per bookie a proxy and a
``BookieProcess`` whose id is the proxy's address (``--bookie-id``) and whose disk usage is read from a
file (the disk monitor's override), so every fault of ``faults.actions`` applies. ``hosts`` maps host
names (``bookie-0`` ..., ``zookeeper``) to ``Host`` objects, ``network`` is their ``ProxyNetwork``,
``addresses`` maps bookie ids to the addresses clients dial, and ``open_store()`` opens the metadata
store for a client (``cluster_base``). Each bookie registers its proxy's port itself
(``--advertised-port``), so every client -- also one that opens the store from the bare ``metadata_uri``,
as Spark's Python workers do -- dials the proxies; with ``advertise_proxies=False`` the bookies register
their own port and ``open_store()`` rewrites the registrations instead (``AdvertisedStore``). ``close()``
heals and resumes everything, then stops every bookie, proxy and server it started, also after a
failure; a context manager.
"""
from __future__ import annotations

import os
from pathlib import Path

from bookie_server.disk_monitor import OVERRIDE_ENV
from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.bookies import BookieProcess
from pyspark_ledger.testing.faults.cluster_base import FaultClusterBase
from pyspark_ledger.testing.faults.hosts import (DISK_OK, AdvertisedStore, Host, LocalBookieHost,
                                                 LocalZooKeeperHost, ProxyNetwork)
from pyspark_ledger.testing.faults.proxy import FaultProxy
from pyspark_ledger.testing.ports import free_port

MAX_BOOKIES = 16
LEASE_SECONDS = 2
ZK_SESSION_S = 2


class LocalFaultCluster(FaultClusterBase):
    """See the module docstring."""

    def __init__(self, base_dir: str | os.PathLike, bookies: int = 5, metadata: str = "sqlite", *,
                 seed: int | None = None, advertise_proxies: bool = True, **bookie_flags) -> None:
        super().__init__()
        if isinstance(bookies, bool) or not isinstance(bookies, int) or not 1 <= bookies <= MAX_BOOKIES:
            raise InvalidArgumentError(f"bookies must be a whole number in 1..{MAX_BOOKIES}, got {bookies!r}")
        if metadata not in ("sqlite", "zookeeper"):
            raise InvalidArgumentError(f"metadata must be 'sqlite' or 'zookeeper', got {metadata!r}")
        self.base_dir = Path(base_dir)
        self.n_bookies = bookies
        self.metadata = metadata
        self.seed = seed
        self.advertise_proxies = advertise_proxies
        self.bookie_flags = {"disk_check_interval": 0.2, "checkpoint_interval": 0, **bookie_flags}
        self.network = ProxyNetwork()
        self.hosts: dict[str, Host] = {}
        self.addresses: dict[str, str] = {}
        self.zookeeper = None
        self.metadata_uri = ""

    def start(self) -> "LocalFaultCluster":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.metadata == "zookeeper":
            from pyspark_ledger.testing.zookeeper import ZooKeeperServer

            self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper").start()
            self.hosts["zookeeper"] = LocalZooKeeperHost("zookeeper", self.zookeeper)
            self.metadata_uri = self.zookeeper.uri("/jepsen", session_timeout=ZK_SESSION_S)
        else:
            self.metadata_uri = f"sqlite:///{self.base_dir}/metadata.db?lease_seconds={LEASE_SECONDS}&poll_interval=0.1"
        open_metadata_store(self.metadata_uri, create=True).close()
        for index in range(self.n_bookies):
            name = f"bookie-{index}"
            port = free_port()
            proxy = FaultProxy(f"127.0.0.1:{port}", seed=None if self.seed is None else self.seed * 100 + index)
            self.network.add(name, proxy)
            usage = self.base_dir / f"{name}-disk-usage"
            usage.write_text(DISK_OK)
            advertised = {"advertised_port": proxy.port} if self.advertise_proxies else {}
            bookie = BookieProcess(self.base_dir / name, self.metadata_uri, port, env={OVERRIDE_ENV: str(usage)},
                                   bookie_id=proxy.address, **advertised, **self.bookie_flags)
            host = LocalBookieHost(name, bookie, proxy, usage)
            self.hosts[name] = host
            self.addresses[bookie.bookie_id] = proxy.address
            bookie.start()

    @property
    def bookie_hosts(self) -> list[LocalBookieHost]:
        return [host for host in self.hosts.values() if host.role == "bookie"]

    def wrap_store(self, store):
        return super().wrap_store(store) if self.advertise_proxies else AdvertisedStore(store, self.addresses)

    def heal_all(self) -> None:
        """Heal the network, resume every paused process, free every disk, restart what was killed."""
        self.network.heal()
        for host in self.hosts.values():
            host.resume()
            if host.role == "bookie":
                host.free_disk()
                if not host.pids():
                    host.restart()
        if self.zookeeper is not None and not self.zookeeper.running:
            self.zookeeper.start()

    def close(self) -> None:
        for host in self.hosts.values():
            host.resume()  # a stopped process ignores SIGTERM until continued
        self.close_stores()
        for host in self.bookie_hosts:
            host.bookie.terminate()
        for host in self.bookie_hosts:
            host.bookie.stop()
        self.network.close()
        if self.zookeeper is not None:
            self.zookeeper.close()

    def __enter__(self) -> "LocalFaultCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
