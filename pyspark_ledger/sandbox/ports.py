"""Checking that a remembered loopback port is free, and naming who holds it if not.

A restarted sandbox must reuse its ports (a bookie's id is its host:port). If
one is taken, the user needs to know which process to stop: ``port_holder``
finds the listening socket's owner through ``/proc`` (Linux; processes of
other users may stay anonymous) and ``describe_holder`` renders it.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

HOST = "127.0.0.1"
_PROC = Path("/proc")
_LISTEN = "0A"
_CMDLINE_CHARS = 160


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if a server could listen on ``host:port`` right now.

    SO_REUSEADDR is set like servers set it, so connections of a previous run
    lingering in TIME_WAIT do not count as taken; a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_holder(port: int) -> int | None:
    """The pid of a process listening on ``port`` (any address), or None if it cannot be told."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for pid_dir in _PROC.iterdir():
        if pid_dir.name.isdigit() and _holds_socket(pid_dir, inodes):
            return int(pid_dir.name)
    return None


def describe_holder(port: int) -> str:
    """'pid 123 (python -m bookie_server ...)' or a hint when the owner is unknown."""
    pid = port_holder(port)
    if pid is None:
        return f"a process this user cannot see (find it with `ss -ltnp | grep :{port}`)"
    return f"pid {pid} ({_cmdline(pid)})"


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _holds_socket(pid_dir: Path, inodes: set[str]) -> bool:
    targets = {f"socket:[{inode}]" for inode in inodes}
    try:
        for fd in (pid_dir / "fd").iterdir():
            if os.readlink(fd) in targets:
                return True
    except OSError:  # gone meanwhile, or not ours to look at
        return False
    return False


def _cmdline(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "command unknown"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip() or "command unknown"
    return text if len(text) <= _CMDLINE_CHARS else text[:_CMDLINE_CHARS - 3] + "..."
