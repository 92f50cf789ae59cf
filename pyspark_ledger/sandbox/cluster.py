"""``Sandbox``: a local cluster — metadata service plus N real bookie processes on 127.0.0.1.

::

    with Sandbox(bookies=3) as sb:                 # temp dir, removed on exit
        client = LedgerClient(sb.metadata_uri)
    sb = Sandbox(data_dir="/tmp/ledger").start()   # kept dir: a later start finds the same cluster
    sb.kill_bookie(1); sb.start_bookie(1); sb.stop()

Identity across restarts: a bookie's id is ``127.0.0.1:<port>``, ledger
ensembles name bookies by id, and the bookie's cookie binds that id to its
data dir. So a restart on the same data dir brings every bookie back on the
*same* port (remembered in ``sandbox.json``) and never moves one: a moved
bookie would be a new, empty bookie, and every ledger on the old one would
lose a replica. If a remembered port is taken, ``start()`` fails before
starting anything, naming the port and the process holding it.

``bookies=None`` means "as many as the data dir remembers, else 3"; a larger
number adds bookies, a smaller one is refused (their ledgers would lose
replicas). ``zookeeper=None`` likewise follows the data dir (default SQLite).
``zones=N`` spreads the bookies round-robin over N zones (``zone-a``,
``zone-b``, ...: bookie i in zone i mod N, started with ``--zone``), for
zone-aware placement (docs/protocol.md P1-P4); ``bookie_zones`` names them.
N is remembered in the data dir: ``None`` follows it (default: no zones), a
number re-spreads every bookie at this start (their ids and data stay).
``tls=True`` makes a throwaway CA and certificates in ``<data dir>/tls`` (kept with a kept data dir, so
the same files serve later starts) and starts every bookie with mutual TLS; ``tls_files`` names the files,
``client_tls`` / ``client_config()`` / ``tls_env`` are what clients need to reach it. The data dir is
created mode 0700.
Every bookie also takes adds and range reads on a framed port (``--add-port``, any free port, registered:
docs/protocol.md W11, W12; with ``tls=True`` over the same mutual TLS), the faster path clients take by default;
``add_port=-1`` turns it off. ``start_bookie`` brings a bookie back on the add port it had (when that port is
still free), as an operator's fixed ``--add-port`` would: a client that learned the port earlier reaches it again
at once.
``announce`` receives one line per bookie as it comes up; other keyword
arguments are bookie-server flags (``checkpoint_interval=0`` ...).
Every process started is stopped by ``stop()`` (SIGTERM to the bookies so
they checkpoint, then ZooKeeper), by ``__exit__`` and, as a last resort, at
interpreter exit; bookies also stop by themselves when the process that
started them is killed (``--exit-with-parent``).
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from pyspark_ledger.errors import (BookieProcessError, DataDirectoryError, InvalidArgumentError,
                                   InvalidConfigurationError, InvalidStateError)
from pyspark_ledger.sandbox.layout import (MAX_ZONES, SQLITE, ZOOKEEPER, BookieSlot, SandboxLayout, load_layout,
                                           save_layout)
from pyspark_ledger.sandbox.lock import LOCK_FILE, DataDirLock
from pyspark_ledger.sandbox.metadata_service import (SandboxMetadata, check_path_fits_uri,
                                                     zookeeper_unavailable_reason)
from pyspark_ledger.sandbox.ports import describe_holder, port_is_free
from pyspark_ledger.sandbox.repair import ensure_repair_key
from pyspark_ledger.security.certs import TlsFiles, write_tls_files
from pyspark_ledger.security.tls import ENV_CA, ENV_CERT, ENV_KEY, ClientTls
from pyspark_ledger.testing.bookies import BookieProcess, free_port

DEFAULT_BOOKIES = 3
DEFAULT_LEASE_SECONDS = 3.0
TLS_DIR = "tls"
_OWN_FILES = {LOCK_FILE}


class Sandbox:
    """A local cluster in this process's care (see the module docstring)."""

    def __init__(self, bookies: int | None = None, data_dir: str | Path | None = None,
                 zookeeper: bool | None = None, *, announce: Callable[[str], Any] | None = None,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, tls: bool = False, zones: int | None = None,
                 **bookie_flags: Any) -> None:
        if not isinstance(tls, bool):
            raise InvalidConfigurationError(f"tls must be True or False, got {tls!r}")
        self._requested_zones = _check_zones(zones, bookie_flags)
        self._tls = tls
        self.tls_files: TlsFiles | None = None  # made (or found) by start() when tls=True
        self._requested_bookies = _check_bookie_count(bookies)
        self._requested_zookeeper = zookeeper
        missing = zookeeper_unavailable_reason() if zookeeper else None
        if missing:
            raise InvalidConfigurationError(missing)
        self._keep_dir = data_dir is not None
        self.data_dir: Path | None = Path(data_dir).expanduser().resolve() if data_dir is not None else None
        self._announce = announce or (lambda _line: None)
        self._lease_seconds = _check_lease(lease_seconds)
        self._bookie_flags = bookie_flags
        self._lock: DataDirLock | None = None
        self._layout: SandboxLayout | None = None
        self._metadata: SandboxMetadata | None = None
        self.bookies: list[BookieProcess] = []
        self._deliberately_down: set[int] = set()
        self._reported_down: set[int] = set()
        #: The cluster's repair key file (made in the data dir at the first start), or None.
        self.repair_key_file: Path | None = None

    # --- state ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._lock is not None and self._lock.held

    @property
    def temporary(self) -> bool:
        """True if the data dir was made by this sandbox and is removed by stop()."""
        return not self._keep_dir

    @property
    def metadata_uri(self) -> str:
        """The metadataServiceUri of this cluster (for LedgerClient, `ledger --metadata`, Spark)."""
        return self._started_metadata().public_uri

    @property
    def zookeeper(self):
        """The ZooKeeperServer, or None for SQLite metadata."""
        return self._started_metadata().zookeeper

    @property
    def client_tls(self) -> ClientTls | None:
        """What a client needs to reach this sandbox's bookies (None: plaintext)."""
        files = self.tls_files
        if files is None:
            return None
        return ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))

    def client_config(self, **overrides: Any):
        """A ``ClientConfig`` for this sandbox: its TLS settings (explicitly none without TLS)."""
        from pyspark_ledger.client.config import ClientConfig

        return ClientConfig(**{"tls": self.client_tls, **overrides})

    @property
    def tls_env(self) -> dict[str, str]:
        """The ``LEDGER_TLS_*`` variables that point the CLI, Spark and LedgerClient at this sandbox's TLS."""
        files = self.tls_files
        if files is None:
            return {}
        return {ENV_CA: str(files.ca), ENV_CERT: str(files.client_cert), ENV_KEY: str(files.client_key)}

    @property
    def bookie_ids(self) -> list[str]:
        return [bookie.bookie_id for bookie in self.bookies]

    @property
    def bookie_zones(self) -> dict[str, str]:
        """Bookie id -> the zone it was started in (empty for a sandbox without zones)."""
        layout = self._layout
        if layout is None or layout.zones is None:
            return {}
        return {slot.bookie_id: layout.zone_of(index) for index, slot in enumerate(layout.bookies)}

    # --- lifecycle -----------------------------------------------------------------
    def start(self) -> "Sandbox":
        """Start the metadata service and every bookie; returns self. Cleans up if anything fails."""
        if self.running:
            return self
        try:
            self._prepare_dir()
            self._lock = DataDirLock(self.data_dir).acquire()
            self._layout = self._resolve_layout(load_layout(self.data_dir))
            self.tls_files = self._tls_files() if self._tls else None
            self._metadata = SandboxMetadata(self.data_dir, self._layout.zookeeper_port, self._lease_seconds)
            self._check_ports()
            save_layout(self.data_dir, self._layout, self._metadata.public_uri)
            atexit.register(self.stop)
            self._metadata.start()
            self.repair_key_file = ensure_repair_key(self.data_dir, self._metadata.public_uri)
            self.bookies = [self._bookie_process(slot) for slot in self._layout.bookies]
            for index in range(len(self.bookies)):
                self._start(index)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM every bookie and wait, stop ZooKeeper, drop the lock, remove a temporary dir. Idempotent."""
        atexit.unregister(self.stop)
        try:
            for bookie in self.bookies:
                bookie.terminate()
            for bookie in self.bookies:
                bookie.stop()
        finally:
            if self._metadata is not None:
                self._metadata.stop()
            if self._lock is not None:
                self._lock.release()
            if not self._keep_dir and self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.data_dir = None  # a later start() makes a fresh temporary dir

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Sandbox({len(self.bookies)} bookies, {state}, data_dir={self.data_dir})"

    # --- single bookies --------------------------------------------------------------
    def kill_bookie(self, index: int) -> int | None:
        """kill -9 bookie ``index`` (a crash, for demos); returns its exit status."""
        bookie = self._bookie(index)
        self._deliberately_down.add(index)
        return bookie.kill()

    def pause_bookie(self, index: int) -> None:
        """SIGSTOP bookie ``index`` (hung, not dead: its connections stay open, it answers nothing and its
        registration lapses after the lease); ``resume_bookie`` continues it, ``kill_bookie`` kills it."""
        self._bookie(index).pause()

    def resume_bookie(self, index: int) -> None:
        """SIGCONT bookie ``index`` after ``pause_bookie``."""
        self._bookie(index).resume()

    def stop_bookie(self, index: int) -> int | None:
        """Stop bookie ``index`` cleanly (SIGTERM, it checkpoints and deregisters)."""
        bookie = self._bookie(index)
        self._deliberately_down.add(index)
        return bookie.stop()

    def start_bookie(self, index: int) -> BookieProcess:
        """Start bookie ``index`` again, same id, port and data; waits until it is ready."""
        bookie = self._bookie(index)
        if bookie.is_running():
            raise BookieProcessError(f"bookie {index} ({bookie.bookie_id}) is already running (pid {bookie.pid})",
                                     bookie_id=bookie.bookie_id)
        self._check_bookie_port(self._layout.bookies[index])
        self._keep_add_port(bookie)
        return self._start(index)

    def add_bookie(self) -> BookieProcess:
        """Start one more bookie on a new free port; it is remembered for later restarts."""
        self._started_metadata()
        slot = BookieSlot(_unused_port(self._layout), f"bookie-{len(self._layout.bookies)}")
        self._layout.bookies.append(slot)
        save_layout(self.data_dir, self._layout, self._metadata.public_uri)
        self.bookies.append(self._bookie_process(slot))
        return self._start(len(self.bookies) - 1)

    def _keep_add_port(self, bookie: BookieProcess) -> None:
        """Start a bookie whose add port was "any free port" on the port it last had, if that one is free."""
        if self._bookie_flags.get("add_port", 0) != 0 or bookie.add_port is None:
            return
        bookie.flags["add_port"] = bookie.add_port if port_is_free(bookie.add_port) else 0

    def poll_exits(self) -> list[tuple[int, BookieProcess]]:
        """Bookies that died on their own since the last call (not those stopped or killed through here)."""
        died = []
        for index, bookie in enumerate(self.bookies):
            if bookie.process is None or bookie.is_running():
                continue
            if index not in self._deliberately_down and index not in self._reported_down:
                self._reported_down.add(index)
                died.append((index, bookie))
        return died

    # --- internals -------------------------------------------------------------------
    def _prepare_dir(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="ledger-sandbox-"))
        check_path_fits_uri(self.data_dir)
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise DataDirectoryError(f"data dir {self.data_dir} exists but is not a directory")
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise DataDirectoryError(f"cannot create data dir {self.data_dir}: {exc}") from exc
        if load_layout(self.data_dir) is None and any(p.name not in _OWN_FILES for p in self.data_dir.iterdir()):
            raise DataDirectoryError(
                f"data dir {self.data_dir} is not empty and holds no sandbox.json, so it is not a sandbox: "
                "pass a new or empty directory")

    def _resolve_layout(self, remembered: SandboxLayout | None) -> SandboxLayout:
        if remembered is None:
            return self._new_layout()
        self._check_same_metadata(remembered)
        wanted = self._requested_bookies or len(remembered.bookies)
        if wanted < len(remembered.bookies):
            raise InvalidConfigurationError(
                f"data dir {self.data_dir} holds {len(remembered.bookies)} bookies; start it with --bookies "
                f"{len(remembered.bookies)} or more (leaving bookies out would take replicas away from their "
                "ledgers), or use another --data-dir")
        while len(remembered.bookies) < wanted:
            remembered.bookies.append(BookieSlot(_unused_port(remembered), f"bookie-{len(remembered.bookies)}"))
        if self._requested_zones is not None:
            remembered.zones = self._requested_zones
        return _check_zones_fit(remembered)

    def _new_layout(self) -> SandboxLayout:
        layout = SandboxLayout(ZOOKEEPER if self._requested_zookeeper else SQLITE)
        if layout.uses_zookeeper:
            layout.zookeeper_port = free_port()
        for index in range(self._requested_bookies or DEFAULT_BOOKIES):
            layout.bookies.append(BookieSlot(_unused_port(layout), f"bookie-{index}"))
        layout.zones = self._requested_zones
        return _check_zones_fit(layout)

    def _check_same_metadata(self, remembered: SandboxLayout) -> None:
        wanted = self._requested_zookeeper
        if wanted is None or bool(wanted) == remembered.uses_zookeeper:
            return
        raise InvalidConfigurationError(
            f"data dir {self.data_dir} keeps its metadata in {remembered.metadata}; start it "
            f"{'with' if remembered.uses_zookeeper else 'without'} --zookeeper, or use another --data-dir")

    def _check_ports(self) -> None:
        self._metadata.check_ports()
        for slot in self._layout.bookies:
            self._check_bookie_port(slot)

    def _check_bookie_port(self, slot: BookieSlot) -> None:
        if not port_is_free(slot.port):
            raise BookieProcessError(
                f"port {slot.port} of bookie {slot.bookie_id} is taken by {describe_holder(slot.port)}: stop that "
                "process and start again. The sandbox does not move the bookie to another port, because its id "
                "is its host:port and its ledgers name it by that id", bookie_id=slot.bookie_id)

    def _tls_files(self) -> TlsFiles:
        """The sandbox's CA and certificates: those of an earlier start, else new ones."""
        directory = self.data_dir / TLS_DIR
        files = TlsFiles(directory, directory / "ca.pem", directory / "bookie.pem", directory / "bookie-key.pem",
                         directory / "client.pem", directory / "client-key.pem")
        present = [path.is_file() for path in (files.ca, files.bookie_cert, files.bookie_key, files.client_cert,
                                               files.client_key)]
        if all(present):
            return files
        if any(present):
            raise DataDirectoryError(f"{directory} holds only some of the sandbox's TLS files: remove it to make "
                                     "new ones (clients then need the new LEDGER_TLS_* files)")
        return write_tls_files(directory)

    def _bookie_process(self, slot: BookieSlot) -> BookieProcess:
        flags = {"exit_with_parent": True, **self._bookie_flags}  # a killed owner leaves no bookie behind
        flags.setdefault("add_port", 0)  # the framed add port (W11; over TLS with tls=True): any free port
        zone = self._layout.zone_of(self._layout.bookies.index(slot))
        if zone is not None:
            flags["zone"] = zone
        if self.tls_files is not None:  # mutual TLS
            flags.update(tls_cert=self.tls_files.bookie_cert, tls_key=self.tls_files.bookie_key,
                         tls_client_ca=self.tls_files.ca)
        return BookieProcess(self.data_dir / slot.data_dir, self._metadata.bookie_uri, slot.port, **flags)

    def _start(self, index: int) -> BookieProcess:
        bookie = self.bookies[index].start()
        self._deliberately_down.discard(index)
        self._reported_down.discard(index)
        zone = self._layout.zone_of(index)
        self._announce(f"bookie {index} up: {bookie.bookie_id} (pid {bookie.pid}, data {bookie.data_dir}"
                       + (f", zone {zone})" if zone else ")"))
        return bookie

    def _bookie(self, index: int) -> BookieProcess:
        self._started_metadata()
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.bookies):
            raise InvalidArgumentError(
                f"bookie index {index!r} is out of range: this sandbox has bookies 0..{len(self.bookies) - 1}")
        return self.bookies[index]

    def _started_metadata(self) -> SandboxMetadata:
        if self._metadata is None or not self.running:
            raise InvalidStateError("the sandbox is not running: call start() or use `with Sandbox(...)`")
        return self._metadata


def _check_bookie_count(bookies: object) -> int | None:
    if bookies is None:
        return None
    if not isinstance(bookies, int) or isinstance(bookies, bool) or bookies < 1:
        raise InvalidConfigurationError(f"bookies must be a whole number >= 1, got {bookies!r}")
    return bookies


def _check_zones(zones: object, bookie_flags: dict) -> int | None:
    if zones is None:
        return None
    if not isinstance(zones, int) or isinstance(zones, bool) or not 1 <= zones <= MAX_ZONES:
        raise InvalidConfigurationError(f"zones must be a whole number from 1 to {MAX_ZONES}, got {zones!r}")
    if "zone" in bookie_flags:
        raise InvalidConfigurationError("give zones=N or the bookie flag zone=NAME, not both")
    return zones


def _check_zones_fit(layout: SandboxLayout) -> SandboxLayout:
    if layout.zones is not None and layout.zones > len(layout.bookies):
        raise InvalidConfigurationError(
            f"--zones {layout.zones} is more zones than the {len(layout.bookies)} bookies can fill (one bookie per "
            f"zone at least): give --zones {len(layout.bookies)} or less, or more --bookies")
    return layout


def _check_lease(lease_seconds: object) -> float:
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, (int, float)) or not 0.5 <= lease_seconds <= 60:
        raise InvalidConfigurationError(f"lease_seconds must be a number of seconds in 0.5..60, got {lease_seconds!r}")
    return float(lease_seconds)


def _unused_port(layout: SandboxLayout) -> int:
    """A free port not already given to another bookie or ZooKeeper of this layout."""
    taken = {slot.port for slot in layout.bookies} | {layout.zookeeper_port}
    while (port := free_port()) in taken:
        continue
    return port
