"""A real, single ZooKeeper server process for tests and local sandboxes.

Runs Debian's ZooKeeper (``apt-get install zookeeper``) with ``java``, on a
free port of 127.0.0.1 only, with its data in a temporary directory::

    with ZooKeeperServer() as zookeeper:
        store = open_metadata_store(zookeeper.uri("/my-test", session_timeout=2), create=True)

``start()`` waits (bounded) until the server answers ``ruok`` with ``imok`` and
serves clients.
``stop()`` kills the process and waits for it; ``start()`` may be called again
afterwards and reuses the port and the data (to simulate an outage).
``ZooKeeperServer.is_available()`` tells whether java and the jar are there.

TLS (off by default): ``ZooKeeperServer(tls=ZooKeeperTls(cert, key, ca))``
also listens on a ``secureClientPort`` (Netty, PEM key and trust stores);
``secure_uri()`` names it with ``tls=1&tls_ca=...``. The plaintext port stays
open (the readiness check and the four-letter words use it).
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from pyspark_ledger.errors import InvalidConfigurationError, InvalidStateError, MetadataError
from pyspark_ledger.testing.ports import free_port

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# zookeeper.jar's manifest already puts slf4j-api, zookeeper-jute, netty... on the class
# path; slf4j-simple is only the logging backend (without it slf4j prints a warning).
LOGGING_JAR = "/usr/share/java/slf4j-simple.jar"
# The Netty connection factory (needed for TLS) also needs these, which the manifest omits.
NETTY_JARS = ("/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
HOST = "127.0.0.1"
_START_ATTEMPTS = 3


@dataclass(frozen=True)
class ZooKeeperTls:
    """The server's PEM certificate (chain), its private key, and the CA that clients trust.

    ``client_auth``: "none" (the default), "want" or "need" (require client certificates
    signed by ``ca_file``).
    """

    cert_file: str | os.PathLike
    key_file: str | os.PathLike
    ca_file: str | os.PathLike
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in ("none", "want", "need"):
            raise InvalidConfigurationError(
                f"client_auth must be 'none', 'want' or 'need', got {self.client_auth!r}")


class ZooKeeperServer:
    """One ZooKeeper server process on 127.0.0.1 (a context manager)."""

    def __init__(self, data_dir: str | os.PathLike | None = None, *, tick_time_ms: int = 200,
                 min_session_timeout_ms: int = 400, max_session_timeout_ms: int = 60_000,
                 start_timeout: float = 30.0, tls: ZooKeeperTls | None = None) -> None:
        self._owned_dir = data_dir is None
        self._base_dir = Path(data_dir) if data_dir else None  # a temp dir is made by start()
        self._settings = {"tickTime": tick_time_ms, "minSessionTimeout": min_session_timeout_ms,
                          "maxSessionTimeout": max_session_timeout_ms}
        self._start_timeout = start_timeout
        self._tls = tls
        self._port: int | None = None
        self._secure_port: int | None = None
        self._process: subprocess.Popen | None = None

    # --- public API ---------------------------------------------------------
    @staticmethod
    def unavailable_reason(tls: bool = False) -> str | None:
        """None if ZooKeeper (with TLS if ``tls``) can run here, else what is missing and how to get it."""
        if shutil.which("java") is None:
            return "java is not installed (apt-get install -y default-jre-headless)"
        for jar in (ZOOKEEPER_JAR, LOGGING_JAR, *(NETTY_JARS if tls else ())):
            if not os.path.isfile(jar):
                return f"{jar} is missing (apt-get install -y zookeeper)"
        return None

    @staticmethod
    def is_available(tls: bool = False) -> bool:
        return ZooKeeperServer.unavailable_reason(tls) is None

    @property
    def port(self) -> int:
        if self._port is None:
            raise MetadataError("ZooKeeperServer was never started; call start() first")
        return self._port

    @property
    def secure_port(self) -> int:
        """The TLS port (``secureClientPort``); only with ``tls=``."""
        if self._tls is None:
            raise InvalidStateError("this ZooKeeperServer has no TLS port; pass tls=ZooKeeperTls(...)")
        if self._secure_port is None:
            raise MetadataError("ZooKeeperServer was never started; call start() first")
        return self._secure_port

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:<port>``, as kazoo and ZooKeeper clients take it."""
        return f"{HOST}:{self.port}"

    @property
    def base_dir(self) -> Path:
        """Where zoo.cfg, the data and the log live."""
        if self._base_dir is None:
            raise MetadataError("ZooKeeperServer was never started; call start() first")
        return self._base_dir

    @property
    def log_path(self) -> Path:
        return self.base_dir / "zookeeper.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def uri(self, chroot: str = "/", **params: float | str) -> str:
        """A metadata store URI, e.g. ``uri("/t1", session_timeout=2)``."""
        return _uri(self.connect_string, chroot, params)

    def secure_uri(self, chroot: str = "/", **params: float | str) -> str:
        """A URI of the TLS port with ``tls=1&tls_ca=<the CA>`` and ``params``."""
        tls = {"tls": 1, "tls_ca": str(Path(self._tls.ca_file).resolve())} if self._tls else {}
        return _uri(f"{HOST}:{self.secure_port}", chroot, {**tls, **params})

    def start(self) -> "ZooKeeperServer":
        """Start the server and wait until it answers (bounded by ``start_timeout``)."""
        reason = self.unavailable_reason(tls=self._tls is not None)
        if reason:
            raise InvalidConfigurationError(f"cannot run ZooKeeper: {reason}")
        if self.running:
            return self
        if self._base_dir is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="zookeeper-"))
        keep_port = self._port is not None
        for _attempt in range(_START_ATTEMPTS):
            if not keep_port:
                self._port = free_port()
                self._secure_port = free_port() if self._tls else None
            if self._launch_and_wait():
                atexit.register(self.stop)
                return self
        raise MetadataError(f"ZooKeeper did not start on {HOST}:{self._port}; "
                            f"its log {self.log_path} ends with:\n{self._log_tail()}")

    def stop(self) -> None:
        """Kill the server process and wait for it (idempotent)."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=30)

    def close(self) -> None:
        """Stop, and remove the data directory if this object created it."""
        self.stop()
        if self._owned_dir and self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._base_dir = None

    def is_serving(self) -> bool:
        """True if the server answers ``ruok`` with ``imok`` and serves clients right now.

        ZooKeeper answers ``imok`` a few hundred ms before it accepts sessions
        (it drops them meanwhile); ``srvr`` reports a ``Mode:`` only once it does.
        """
        return (self.four_letter_word("ruok") == "imok" and "Mode: " in self.four_letter_word("srvr")
                and (self._tls is None or _accepts(self.secure_port)))

    def four_letter_word(self, command: str) -> str:
        """The server's answer to a whitelisted four-letter command ('' if unreachable)."""
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                sock.sendall(command.encode())
                return _read_all(sock).decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "ZooKeeperServer":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ZooKeeperServer({HOST}:{self._port}, running={self.running})"

    # --- internals ------------------------------------------------------------
    def _launch_and_wait(self) -> bool:
        config = self._write_config()
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                 "-cp", ":".join(self._class_path()), MAIN_CLASS, str(config)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                cwd=self.base_dir)
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False  # e.g. the port was taken meanwhile: try another
            if self.is_serving():
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def _write_config(self) -> Path:
        data_dir = self.base_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"dataDir={data_dir}", f"clientPort={self._port}", f"clientPortAddress={HOST}",
                 "admin.enableServer=false", "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                 "maxClientCnxns=0"]
        lines += [f"{name}={value}" for name, value in self._settings.items()]
        lines += self._tls_config()
        config = self.base_dir / "zoo.cfg"
        config.write_text("\n".join(lines) + "\n")
        return config

    def _class_path(self) -> list[str]:
        return [ZOOKEEPER_JAR, LOGGING_JAR, *(NETTY_JARS if self._tls else ())]

    def _tls_config(self) -> list[str]:
        if self._tls is None:
            return []
        keystore = self.base_dir / "tls-keystore.pem"  # ZooKeeper wants the PKCS#8 key and the chain in one file
        keystore.write_bytes(_pkcs8_key(Path(self._tls.key_file).read_bytes())
                             + Path(self._tls.cert_file).read_bytes())
        keystore.chmod(0o600)
        return [f"secureClientPort={self._secure_port}", f"secureClientPortAddress={HOST}",
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={keystore}", "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={Path(self._tls.ca_file).resolve()}",
                "ssl.trustStore.type=PEM", f"ssl.clientAuth={self._tls.client_auth}"]

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _uri(connect_string: str, chroot: str, params: dict) -> str:
    path = chroot if chroot.startswith("/") else f"/{chroot}"
    query = f"?{urlencode(params)}" if params else ""
    return f"zk://{connect_string}{path}{query}"


def _pkcs8_key(pem: bytes) -> bytes:
    """``pem`` (any PEM private key format) as unencrypted PKCS#8, the one ZooKeeper's PEM reader takes."""
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)
