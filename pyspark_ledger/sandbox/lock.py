"""One sandbox per data dir: an exclusive ``flock`` on ``sandbox.lock`` holding the owner's pid.

The kernel drops the lock when its holder dies (even by kill -9), so a crashed
sandbox never leaves a stale lock behind; the pid in the file only serves the
message that tells the second sandbox which process to stop.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pyspark_ledger.errors import DataDirectoryError

LOCK_FILE = "sandbox.lock"


class DataDirLock:
    """An exclusive lock on a sandbox data dir (``acquire()`` / ``release()``)."""

    def __init__(self, base_dir: Path) -> None:
        self.path = Path(base_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "DataDirLock":
        """Take the lock or raise DataDirectoryError naming the sandbox that holds it."""
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DataDirectoryError(
                f"another sandbox ({holder}) is already running on data dir {self.path.parent}: stop it first "
                f"(Ctrl-C in its terminal{_kill_hint(holder)}), or pass another --data-dir") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Clear the pid and drop the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock


def _read_pid(fd: int) -> str:
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _kill_hint(holder: str) -> str:
    pid = holder.removeprefix("pid ")
    return f", or `kill {pid}`" if pid.isdigit() else ""
