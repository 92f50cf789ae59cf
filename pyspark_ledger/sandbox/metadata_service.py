"""The sandbox's metadata service: an embedded SQLite file, or a local ZooKeeper server.

``SandboxMetadata`` gives two URIs: ``public_uri`` for users (printed, what
``ledger`` and Spark take) and ``bookie_uri`` for the sandbox's bookies, the
same store with a short lease / session timeout so that a killed bookie drops
out of ``ledger bookies`` within seconds and can be restarted quickly.

ZooKeeper runs from the sandbox dir (``zookeeper/``) on a port remembered in
the layout: ``ZooKeeperServer`` picks a new free port on its first start only,
so ``_PinnedZooKeeper`` hands it the remembered one.
"""
from __future__ import annotations

from pathlib import Path

from pyspark_ledger.errors import InvalidConfigurationError, MetadataError
from pyspark_ledger.sandbox.layout import HOST
from pyspark_ledger.sandbox.ports import describe_holder, port_is_free
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

SQLITE_FILE = "metadata.db"
ZOOKEEPER_DIR = "zookeeper"
CHROOT = "/ledger"
_POLL_INTERVAL_S = 0.2


def zookeeper_unavailable_reason() -> str | None:
    """None if a local ZooKeeper can run, else what is missing and the package that brings it."""
    reason = ZooKeeperServer.unavailable_reason()
    if reason is None:
        return None
    return (f"--zookeeper needs a local ZooKeeper, but {reason}. Install it with `apt-get install -y zookeeper` "
            "(it brings java too), or leave out --zookeeper to use embedded SQLite metadata")


def check_path_fits_uri(base_dir: Path) -> None:
    """The data dir ends up inside a URI: refuse characters a URI would cut it at."""
    bad = sorted(set("?#") & set(str(base_dir)))
    if bad:
        raise InvalidConfigurationError(
            f"data dir {str(base_dir)!r} contains {' and '.join(repr(c) for c in bad)}, which cannot appear in a "
            "metadata URI: choose a directory path without them")


class _PinnedZooKeeper(ZooKeeperServer):
    """A ZooKeeperServer that starts on a given port instead of a fresh one."""

    def __init__(self, data_dir: Path, port: int) -> None:
        super().__init__(data_dir)
        self._port = port  # ZooKeeperServer keeps an already known port on start()


class SandboxMetadata:
    """Starts/stops the metadata service of one sandbox and names its URIs."""

    def __init__(self, base_dir: Path, zookeeper_port: int | None, lease_seconds: float) -> None:
        self.base_dir = Path(base_dir)
        self.zookeeper_port = zookeeper_port
        self.lease_seconds = lease_seconds
        self.zookeeper: ZooKeeperServer | None = None

    @property
    def public_uri(self) -> str:
        if self.zookeeper_port is None:
            return f"sqlite://{self.base_dir / SQLITE_FILE}"
        return f"zk://{HOST}:{self.zookeeper_port}{CHROOT}"

    @property
    def bookie_uri(self) -> str:
        if self.zookeeper_port is None:
            return f"{self.public_uri}?lease_seconds={self.lease_seconds:g}&poll_interval={_POLL_INTERVAL_S:g}"
        return f"{self.public_uri}?session_timeout={self.lease_seconds:g}"

    def check_ports(self) -> None:
        """MetadataError naming the process that holds the remembered ZooKeeper port."""
        port = self.zookeeper_port
        if port is not None and not (self.zookeeper and self.zookeeper.running) and not port_is_free(port):
            raise MetadataError(
                f"ZooKeeper port {port} of this sandbox is taken by {describe_holder(port)}: stop that process "
                "and start the sandbox again (the port is remembered in sandbox.json)")

    def start(self) -> None:
        """Start ZooKeeper if this sandbox uses it (SQLite needs no process)."""
        if self.zookeeper_port is None or (self.zookeeper and self.zookeeper.running):
            return
        reason = zookeeper_unavailable_reason()
        if reason:
            raise InvalidConfigurationError(reason)
        self.check_ports()
        self.zookeeper = _PinnedZooKeeper(self.base_dir / ZOOKEEPER_DIR, self.zookeeper_port).start()

    def stop(self) -> None:
        """Stop ZooKeeper (its data stays in the sandbox dir)."""
        if self.zookeeper is not None:
            self.zookeeper.stop()
