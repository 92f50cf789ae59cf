"""A throwaway NATS JetStream cluster on 127.0.0.1: the peer the benchmarks set our bookies beside.

``NatsCluster(directory, nodes=3)`` writes one configuration file per node (client port, cluster routes to
every other node on loopback, JetStream with its own store directory under ``directory``, ``max_payload``
large enough for 1 MiB messages) and starts Debian's ``nats-server`` once per node. ``start()`` returns when
every node answers on its client port; the caller waits for the JetStream meta leader through a client
(``wait_for_jetstream`` in ``nats_peer.py``). ``stop()`` ends every process it started (SIGTERM, then SIGKILL)
and is safe to call twice; the class is a context manager that stops on the way out, also on errors.

``nats_server_binary()`` finds the binary (``$PATH``, then ``/usr/sbin``) or returns None, and
``nats_server_version()`` asks it for its version.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark_ledger.testing.bookies import free_port  # noqa: E402

MISSING = "nats-server not installed (apt-get install nats-server)"
MAX_PAYLOAD = 2 * 1024 * 1024  # one 1 MiB message, its headers and room to spare (the server's limit is 64 MiB)


def nats_server_binary() -> str | None:
    found = shutil.which("nats-server")
    if found is None and os.access("/usr/sbin/nats-server", os.X_OK):
        found = "/usr/sbin/nats-server"
    return found


def nats_server_version(binary: str) -> str:
    completed = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=True)
    return completed.stdout.strip().removeprefix("nats-server:").strip()


def _config(name: str, port: int, route_port: int, routes: list[int], store: Path) -> str:
    route_urls = ", ".join(f'"nats-route://127.0.0.1:{other}"' for other in routes)
    return (f'server_name: "{name}"\n'
            f'host: "127.0.0.1"\nport: {port}\n'
            f"max_payload: {MAX_PAYLOAD}\n"
            f'jetstream {{\n  store_dir: "{store}"\n  max_memory_store: 268435456\n}}\n'
            f'cluster {{\n  name: "bench"\n  host: "127.0.0.1"\n  port: {route_port}\n'
            f"  routes: [{route_urls}]\n}}\n")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


class NatsCluster:
    """``nodes`` nats-server processes clustered over loopback, each with its own JetStream store."""

    def __init__(self, directory: Path, nodes: int = 3, binary: str | None = None) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        found = binary or nats_server_binary()
        if found is None:
            raise FileNotFoundError(MISSING)
        self.binary, self.directory, self.nodes = found, Path(directory), nodes
        self.ports = [free_port() for _ in range(nodes)]
        self.route_ports = [free_port() for _ in range(nodes)]
        self.names = [f"n{index}" for index in range(nodes)]
        self.processes: list[subprocess.Popen] = []

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{port}" for port in self.ports]

    def url_of(self, name: str) -> str:
        return self.urls[self.names.index(name)]

    @property
    def pids(self) -> dict[str, int]:
        return {f"nats-{name}": process.pid for name, process in zip(self.names, self.processes)}

    def start(self, timeout: float = 30.0) -> "NatsCluster":
        try:
            for index, name in enumerate(self.names):
                node_dir = self.directory / name
                (node_dir / "store").mkdir(parents=True, mode=0o700)
                others = [port for other, port in enumerate(self.route_ports) if other != index]
                config = node_dir / "nats.conf"
                config.write_text(_config(name, self.ports[index], self.route_ports[index], others, node_dir / "store"))
                log = open(node_dir / "server.log", "wb")
                try:
                    self.processes.append(subprocess.Popen([self.binary, "-c", str(config)], stdout=log,
                                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
                finally:
                    log.close()
            deadline = time.monotonic() + timeout
            for index, port in enumerate(self.ports):
                while not _answers(port):
                    if self.processes[index].poll() is not None:
                        raise RuntimeError(f"nats-server {self.names[index]} exited with "
                                           f"{self.processes[index].returncode}: {self.log_tail(index)}")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"nats-server {self.names[index]} did not answer on port {port} "
                                           f"within {timeout} s: {self.log_tail(index)}")
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, index: int, characters: int = 600) -> str:
        path = self.directory / self.names[index] / "server.log"
        return path.read_text(errors="replace")[-characters:] if path.exists() else ""

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []

    def __enter__(self) -> "NatsCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
