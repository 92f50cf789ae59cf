"""Reading the small files that hold secrets or settings (keys, certificates, credentials), checked at the edge.

One rule for every such file: it must be a regular file (a FIFO would block the reader), at most ``limit``
bytes, and, when it holds a secret, not accessible to group or others. Each failure raises the caller's
error class with a message that starts with the caller's label (the setting and path) and says the fix.
"""
from __future__ import annotations

import os
import stat

__all__ = ["read_checked_file"]


def read_checked_file(path: str | os.PathLike, label: str, *, limit: int, error: type[Exception],
                      private: bool = False) -> bytes:
    """The bytes of ``path``; ``error(label + ": ...")`` if it is missing, not a regular file, over ``limit``
    bytes, or (``private``) accessible to group or others."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before open(): opening a FIFO blocks
            raise error(f"{label}: not a regular file")
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())  # the file opened, not the name, is what is checked
            if not stat.S_ISREG(info.st_mode):
                raise error(f"{label}: not a regular file")
            if private and info.st_mode & 0o077:
                raise error(f"{label}: a secret readable by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                            f"run: chmod 600 {os.fspath(path)}")
            if info.st_size > limit:
                raise error(f"{label}: {info.st_size} bytes, over the limit of {limit}")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise error(f"{label}: cannot read it ({exc.strerror or exc})") from exc
    if len(data) > limit:  # grew while being read
        raise error(f"{label}: over the limit of {limit} bytes")
    return data
