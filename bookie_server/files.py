"""Low-level file helpers of the storage engine: full writes, fsync, atomic replace, numbered files.

These functions raise ``OSError`` like the calls they wrap; the storage
modules translate it into ``StorageError`` at their boundary.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path
from typing import Sequence

try:
    IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError):  # pragma: no cover - every Linux has it
    IOV_MAX = 1024

Buffer = bytes | bytearray | memoryview
log = logging.getLogger(__name__)
# Linux's sync_file_range flags: wait for pages already being written, start writing the range's dirty pages,
# wait for them
_WRITE_AND_WAIT = 1 | 2 | 4
_WRITE = 2  # start writing the range's dirty pages, no wait


def _sync_file_range():
    """libc's ``sync_file_range`` (Linux), or None where there is none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (AttributeError, OSError):  # not Linux: the checkpoint's fsync writes it all at once
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_SYNC_RANGE = _sync_file_range()
_KEEP_SIZE = 1  # Linux's FALLOC_FL_KEEP_SIZE: blocks past the end of the file, its size unchanged


def _fallocate():
    """libc's ``fallocate`` (Linux), or None where there is none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).fallocate
    except (AttributeError, OSError):  # not Linux: entry logs grow as they are written
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


_FALLOCATE = _fallocate()


def write_all(fd: int, chunks: Sequence[Buffer]) -> int:
    """Write every chunk, in order, at the file position; return the byte count.

    One ``writev`` per IOV_MAX chunks; short writes are resumed so that a
    partial write is never mistaken for a complete one.
    """
    if len(chunks) <= IOV_MAX:  # the usual case: one writev (this runs for every batch of adds)
        expected = sum(map(len, chunks))
        written = os.writev(fd, chunks)
        if written < expected:
            _finish_short_write(fd, chunks, written)
        return expected
    total = 0
    for start in range(0, len(chunks), IOV_MAX):
        group = chunks[start:start + IOV_MAX]
        expected = sum(map(len, group))
        written = os.writev(fd, group)
        if written < expected:
            _finish_short_write(fd, group, written)
        total += expected
    return total


def unwritten(buffers: Sequence[Buffer], nbytes: int) -> list:
    """``buffers`` without their first ``nbytes`` bytes: what is left after a vectored write or send took
    ``nbytes`` (the buffer cut in two becomes a view of its rest)."""
    for index, buffer in enumerate(buffers):
        if nbytes < len(buffer):
            rest = list(buffers[index:])
            if nbytes:
                rest[0] = memoryview(buffer)[nbytes:]
            return rest
        nbytes -= len(buffer)
    return []


def _finish_short_write(fd: int, group: Sequence[Buffer], written: int) -> None:
    for chunk in group:
        if written >= len(chunk):
            written -= len(chunk)
            continue
        view = memoryview(chunk)[written:]
        written = 0
        while view:
            count = os.write(fd, view)
            if count <= 0:
                raise OSError(f"write made no progress on fd {fd}")
            view = view[count:]


def write_out(fd: int, start: int, end: int, step: int) -> bool:
    """Write the file's dirty pages from ``start`` to ``end`` to the disk ``step`` bytes at a time, each step
    waited for before the next is started (``sync_file_range``; no cache flush, no metadata: an fsync must follow
    for durability), so that the disk's queue never holds more than a step of them; False where there is no
    ``sync_file_range`` (the fsync that follows writes it all). Raises OSError as an fsync would: a writeback error
    that ``sync_file_range`` reports is reported to this descriptor once only, so the fsync after it would not
    see it again."""
    if _SYNC_RANGE is None:
        return False
    for offset in range(start, end, step):
        if not _sync_range(fd, offset, min(step, end - offset), _WRITE_AND_WAIT):
            return False
    return True


def start_writeback(fd: int, start: int, end: int) -> None:
    """Start writing the file's dirty pages from ``start`` to ``end`` to the disk and return (``sync_file_range``
    WRITE: no wait for them, no cache flush, no metadata, so nothing is durable until an fsync); nothing where there
    is no such call. OSError if the kernel refuses (the caller treats it as a failed write). No error of the
    writes it starts is taken from the file here: the fsync after reports them."""
    if _SYNC_RANGE is not None and end > start:
        _sync_range(fd, start, end - start, _WRITE)


def _sync_range(fd: int, offset: int, nbytes: int, flags: int) -> bool:
    """One ``sync_file_range`` call (``_SYNC_RANGE`` is there); False if the kernel has none (ENOSYS), OSError if
    it refuses."""
    if _SYNC_RANGE(fd, offset, nbytes, flags) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ENOSYS:
        return False
    raise OSError(code, f"sync_file_range of {nbytes} bytes at offset {offset} failed: {os.strerror(code)}")


def reserve_ahead(fd: int, start: int, length: int) -> None:
    """Allocate the file's blocks for ``length`` bytes from ``start`` without changing its size or anything it
    reads (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``): appends into them then take blocks the file already
    has instead of allocating as they go. OSError if the file system cannot (EOPNOTSUPP), has no room (ENOSPC),
    or the platform has no such call (ENOSYS)."""
    if _FALLOCATE is None:
        raise OSError(errno.ENOSYS, "fallocate is not available on this platform")
    if _FALLOCATE(fd, _KEEP_SIZE, start, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"fallocate of {length} bytes at offset {start} failed: {os.strerror(code)}")


def release_reserved(fd: int) -> int:
    """Give back blocks ``reserve_ahead`` allocated past the end of the file: truncate it to its own size, which
    changes no byte it holds (the size is read here, so no caller's idea of the end can cut a record). The file
    must not be appended to meanwhile. Returns that size. Raises OSError."""
    size = os.fstat(fd).st_size
    os.ftruncate(fd, size)
    return size


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (new, renamed or removed files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, whole."""
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [data])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)


def make_dirs(directory: Path) -> None:
    """Create ``directory`` (and parents) and make its entry durable in its parent."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    fsync_dir(directory.parent)


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` (and parents) readable by its owner only (mode 0700). An existing one is left as it
    is (never loosened, never tightened behind the operator's back); if others can read or enter it, a warning
    names the chmod to run."""
    if not directory.is_dir():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask; parents keep the umask's mode
        fsync_dir(directory.parent)
        return
    mode = stat.S_IMODE(os.stat(directory).st_mode)
    if mode & 0o077:
        log.warning(
            "directory %s is open to group or others (mode %o): it holds ledger entries and keys; run: chmod 700 %s",
            directory, mode, directory)


def numbered_files(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """Files named ``<hex id><suffix>`` in ``directory``, sorted by id."""
    found = []
    for path in directory.iterdir():
        name = path.name
        if not name.endswith(suffix):
            continue
        try:
            found.append((int(name[: -len(suffix)], 16), path))
        except ValueError:
            continue
    return sorted(found)


def numbered_name(file_id: int, suffix: str) -> str:
    return f"{file_id:016x}{suffix}"


def lock_directory(lock_path: Path) -> int:
    """Take an exclusive lock so one process at a time uses a data directory; return its fd."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def unlock_directory(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
