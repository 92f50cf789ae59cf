"""Network namespaces through the ``ip`` command, and sockets opened inside one from this process.

``ip_command(...)`` runs ``ip`` (bounded) and raises ``ClusterError`` with its
stderr; ``add_namespace``/``delete_namespace``/``list_namespaces`` and
``namespace_pids`` wrap ``ip netns``. ``netns_unavailable_reason()`` says why
namespaces cannot be made here (not root, no ``ip``), or None.

``socket_in(netns)`` opens a socket inside another namespace without a child
process: ``setns(2)`` moves only the calling thread, so the thread enters the
namespace, creates the socket (which stays in that namespace for its whole
life) and returns to its own namespace before anything else runs on it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from pyspark_ledger.errors import ClusterError, InvalidStateError

IP_TIMEOUT_S = 30.0
NETNS_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000
_setns_lock = threading.Lock()



def netns_unavailable_reason() -> str | None:
    """None if this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process runs as uid %d)" % os.geteuid()
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    try:
        ip_command("netns", "list")
    except ClusterError as exc:
        return f"`ip netns` does not work here: {exc}"
    return None


def ip_command(*args: str, netns: str | None = None, check: bool = True) -> str:
    """``ip [-n NETNS] ARGS``; its stdout. ClusterError (with stderr) when it fails and ``check``."""
    command = ["ip", *(("-n", netns) if netns else ()), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"`{' '.join(command)}` failed: {exc}") from exc
    if check and done.returncode != 0:
        raise ClusterError(f"`{' '.join(command)}` failed with status {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def list_namespaces() -> list[str]:
    """The names of the named network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in ip_command("netns", "list").splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    ip_command("netns", "add", name)
    ip_command("link", "set", "lo", "up", netns=name)


def namespace_pids(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` ([] if it is gone)."""
    out = ip_command("netns", "pids", name, check=False)
    return [int(word) for word in out.split() if word.isdigit()]


def kill_namespace_processes(name: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in namespace ``name`` until none is left (bounded); the pids found."""
    found: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = [pid for pid in namespace_pids(name) if not _is_zombie(pid)]
        if not pids:
            return found
        found += [pid for pid in pids if pid not in found]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() >= deadline:
            raise ClusterError(f"processes {pids} in network namespace {name} survive SIGKILL")
        time.sleep(0.1)


def delete_namespace(name: str) -> None:
    """Kill what runs in namespace ``name``, then delete it (its veth ends and bridges go with it)."""
    if name not in list_namespaces():
        return
    kill_namespace_processes(name)
    ip_command("netns", "delete", name)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True  # gone


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise ClusterError(f"setns failed: {os.strerror(error)}")


@contextmanager
def inside(netns: str) -> Iterator[None]:
    """Run the body with this thread in network namespace ``netns``; keep the body to socket creation."""
    path = os.path.join(NETNS_DIR, netns)
    if not os.path.exists(path):
        raise InvalidStateError(f"network namespace {netns} does not exist ({path} is missing)")
    with _setns_lock:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
            os.close(own)


def connect_in(netns: str, address: str, port: int, timeout_s: float = 2.0) -> socket.socket:
    """A TCP connection from inside ``netns`` to ``address:port`` (OSError if it cannot be made)."""
    with inside(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


def listen_in(netns: str, address: str, port: int = 0) -> socket.socket:
    """A listening TCP socket inside ``netns`` on ``address:port`` (0: any free port)."""
    with inside(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((address, port))
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def four_letter_word(netns: str, address: str, port: int, command: str, timeout_s: float = 2.0) -> str:
    """A ZooKeeper four-letter word asked from inside ``netns`` ('' when unreachable)."""
    try:
        with connect_in(netns, address, port, timeout_s) as sock:
            sock.sendall(command.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def run_in(netns: str, command: Sequence[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``command`` inside ``netns`` to completion (output captured)."""
    return subprocess.run(["ip", "netns", "exec", netns, *command], capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)
