"""Free TCP ports for servers started by tests, the sandbox and the benchmarks.

A port found by binding port 0 comes from the kernel's ephemeral range, the
same range it draws from for every outgoing connection: between the moment
the port is found and the moment the server binds it, a client socket of any
process may take it, and the server fails to start. ``free_port`` instead
picks a port below that range, which the kernel never hands out by itself,
checks that nothing listens on it, and never gives the same port twice in one
process (two servers started together cannot be told the same one).
"""
from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 20_000
_IANA_EPHEMERAL_LOW = 49_152
_given: set[int] = set()
_lock = threading.Lock()
_random = random.Random()


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (Linux's setting; the IANA range elsewhere)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _IANA_EPHEMERAL_LOW


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that nothing listens on now, outside the ephemeral range if it can be."""
    high = ephemeral_low()
    with _lock:
        if high - LOWEST >= 1_000:
            for _ in range(200):
                port = _random.randrange(LOWEST, high)
                if port not in _given and _bindable(host, port):
                    _given.add(port)
                    return port
        while True:  # no room below the ephemeral range: the kernel's choice
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            if port not in _given:
                _given.add(port)
                return port


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
