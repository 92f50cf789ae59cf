"""Which process holds the write lock of a SQLite metadata file, for the error that says it is stuck.

In WAL mode SQLite's write lock is a POSIX record lock on one byte of the ``-shm`` file (byte 120, the
first of its lock bytes; the default ``unix`` VFS). Linux lists every such lock in ``/proc/locks`` with
the holder's pid, the file's inode and the locked range, so the holder can be named without opening the
``-shm`` file (closing a descriptor of it would drop this process's own SQLite locks on it). ``describe``
gives one sentence: who holds it, whether it is stopped (SIGSTOP), and what to do; best effort, so
elsewhere (no ``/proc/locks``, another VFS) it says how to look for the holder by hand.
"""
from __future__ import annotations

import os

WRITE_LOCK_BYTE = 120
PROC_LOCKS = "/proc/locks"
_STOPPED = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger"}


def write_lock_holder(db_path: str, proc_locks: str = PROC_LOCKS) -> int | None:
    """The pid that holds a write lock on byte 120 of ``db_path``-shm, or None if none is listed."""
    try:
        inode = os.stat(f"{db_path}-shm").st_ino
        with open(proc_locks) as handle:
            lines = handle.readlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, listed under the lock it waits for
            continue
        try:
            kind, mode, pid, file_id, start, end = fields[1], fields[3], fields[4], fields[5], fields[6], fields[7]
            first, last = int(start), (None if end == "EOF" else int(end))
            found_inode = int(file_id.rsplit(":", 1)[1])
            holder = int(pid)
        except (IndexError, ValueError):
            continue
        if (kind == "POSIX" and mode == "WRITE" and found_inode == inode and first <= WRITE_LOCK_BYTE
                and (last is None or WRITE_LOCK_BYTE <= last) and holder != os.getpid()):
            return holder
    return None


def describe(db_path: str, proc_locks: str = PROC_LOCKS) -> str:
    """Who holds the write lock of ``db_path`` and what to do about it, as one sentence."""
    pid = write_lock_holder(db_path, proc_locks)
    if pid is None:
        return (f"look for a process that has {db_path} open and is stopped or hung (fuser -v {db_path} "
                "lists them; state T in ps is stopped: continue it with kill -CONT PID), then retry")
    state, command = _process(pid)
    if state in _STOPPED:
        return (f"process {pid} ({command}) holds it and is {_STOPPED[state]}: continue it (kill -CONT {pid}) or "
                "end it, then retry")
    return (f"process {pid} ({command}) holds it (state {state or 'unknown'}): it is slow or hung inside a "
            "transaction; wait for it or end it, then retry")


def _process(pid: int) -> tuple[str, str]:
    """The state letter and command line of ``pid`` ('' and '?' if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    return state, (command[:120] or "?")
