"""The current entry log written around the page cache, each block once (docs/protocol.md B9).

``DirectWriter`` copies each batch of records into a ring of aligned buffers of its own (``BUFFERS`` of
``STAGE_BYTES``); each buffer is handed to a thread of the writer's own as soon as it is full, and the thread
writes with ``O_DIRECT``, as whole blocks, everything handed to it since its last write, in one ``pwritev``,
while appends fill the next free buffer. Bytes that do not fill a buffer stay there (*staged*) until it fills, a
sync needs them (``flush``), or the log is left (``begin``, ``finish``): then they are handed over with the rest
of their last block zeroed, and the log's next records start at the next block boundary, so no block is ever
written twice. Those zeros are padding, which every reader of an entry log steps over (``padding_end``). Bytes
not yet in the file are read from the buffers (``read_staged``).

Why: beside Spark's JVM the page-cache copy of a buffered write (page allocation, the copy, writeback) cost a
bookie several times what it costs alone (docs/measurements.md, "The Spark write's bookies: copies that slow
down beside Spark"); a direct write copies once, into memory that stays mapped, and hands the device whole
blocks. Staging keeps small adds off the device: a batch of one 1 KiB entry is a copy into memory. Small
buffers written as soon as they fill keep a sync short: it finds at most one buffer's worth not yet handed
over, where two large buffers left it a whole buffer to write after the one in flight (docs/measurements.md,
"Direct writes from a ring of buffers").

Staged bytes are not in the file: a bookie killed before they were written loses them there, which costs
nothing, because an entry-log body is relied on only after a sync (docs/protocol.md B1, B2): a journal
reference to a body is written after the entry log's sync, and a body copied into the journal is replayed
from it.

Locking: every method holds the writer's condition, released only while waiting (for a free buffer, or for
the thread to write what a sync needs); appends must come one at a time (the storage's lock serializes them). The
thread writes with the condition released: the buffers it writes are not changed until it gives them back.
``read_staged`` takes the condition only for bytes at or past ``written``, the end of what the file holds,
which only grows within a log and is set after the bytes are written.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
from collections import deque
from pathlib import Path
from typing import Sequence

from bookie_server.files import Buffer, unwritten

BLOCK = 4096  # the unit of a direct write's offset and length, and of the padding rule (B9)
STAGE_BYTES = 256 * 1024  # one aligned buffer of the ring: handed to the thread whenever full
BUFFERS = 16  # buffers in the ring: appends wait for a free one only when the disk falls this far behind
_ZEROS = bytes(BLOCK)


def padding_end(data, offset: int, size: int) -> int | None:
    """Where the next record may start when the bytes at ``offset``, where a record was expected, are padding
    (B9): ``offset`` is not a multiple of ``BLOCK`` and the bytes from it to the next multiple (or to ``size``)
    are all zero. None if they are not padding. ``data`` is the log's bytes (an mmap, bytes or memoryview)."""
    if offset >= size or offset % BLOCK == 0:
        return None
    end = min(offset - offset % BLOCK + BLOCK, size)
    return end if data[offset:end] == _ZEROS[:end - offset] else None


def open_direct(path: Path) -> int | None:
    """A write-only ``O_DIRECT`` descriptor of ``path``; None if its file system does not do direct I/O.
    Raises any other OSError."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise


class DirectWriter:
    """Writes one log at a time (``begin``) through a descriptor from ``open_direct`` (see the module docstring).

    A ring of ``buffers`` aligned buffers of ``stage_bytes`` each: appends fill the *active* one; a full one is
    queued for a thread of the writer's own, which writes all that is queued at once while appends fill the next
    free buffer (an append waits only when every buffer is queued), so an add never waits for the device unless
    the disk is slower than the adds. Methods raise OSError once a write failed; the log's tail is then undefined
    (the caller stops appending)."""

    def __init__(self, stage_bytes: int | None = None, buffers: int | None = None) -> None:
        stage_bytes = STAGE_BYTES if stage_bytes is None else stage_bytes
        buffers = BUFFERS if buffers is None else buffers
        if stage_bytes < BLOCK or stage_bytes % BLOCK:
            raise ValueError(f"the direct-write buffer must be a positive multiple of {BLOCK} bytes")
        if buffers < 2:
            raise ValueError("the direct writer needs at least 2 buffers")
        self._cond = threading.Condition()
        self._buffers = tuple(mmap.mmap(-1, stage_bytes) for _ in range(buffers))  # page aligned
        self._capacity = stage_bytes
        self._free = deque(range(1, buffers))  # buffers neither filled nor queued
        # queued for the thread, in the log's order: (buffer, offset in the log, bytes: whole blocks); the first
        # starts at ``written``, each where the one before ends, the last at ``_active_at``
        self._queue: deque[tuple[int, int, int]] = deque()
        self._fd: int | None = None
        self._log_id: int | None = None
        self._thread: threading.Thread | None = None  # started at the first hand-off
        self._stopping = False
        self._error: OSError | None = None
        self.written = 0  # the file holds the log's bytes below this offset (a block boundary)
        self._active: int | None = 0  # the buffer appends fill (None: all are queued), the log's bytes from:
        self._active_at = 0  # the end of the queued bytes
        self._staged = 0  # bytes in the active buffer
        self.end = 0  # the log's end: where its next records go (``_active_at + _staged``)

    def begin(self, log_id: int, fd: int) -> None:
        """Leave the current log (``finish``), then write the new, empty log ``log_id`` through ``fd``."""
        with self._cond:
            self._finish()
            self._fd, self._log_id = fd, log_id
            self.written = self._active_at = self._staged = self.end = 0

    def append(self, chunks: Sequence[Buffer], nbytes: int) -> int:
        """Stage records (their bytes in order, ``nbytes`` in all) at the log's end; return where they start.
        A buffer that fills is queued for the writing thread."""
        with self._cond:
            self._check()
            start = self.end
            capacity = self._capacity
            buffer, pos = self._buffer(), self._staged
            if pos + nbytes < capacity:  # the usual case: the batch fits, copied chunk by chunk in C
                buffer.seek(pos)
                write = buffer.write
                for chunk in chunks:
                    write(chunk)
                pos = buffer.tell()
                chunks = ()
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                taken, size = 0, len(view)
                while taken < size:
                    if buffer is None:  # the last one filled: the next free one (waits if all are queued)
                        buffer, pos = self._buffer(), 0
                    step = min(size - taken, capacity - pos)
                    buffer[pos:pos + step] = view[taken:taken + step]
                    pos += step
                    taken += step
                    if pos == capacity:
                        self._staged = pos
                        self._queue_active(capacity)
                        buffer, pos = None, 0
            self._staged, self.end = pos, self._active_at + pos
            if self.end - start != nbytes:
                raise ValueError(f"records of {self.end - start} bytes staged, {nbytes} announced")
            return start

    def flush(self, log_id: int) -> None:
        """Write every staged byte of log ``log_id`` (if it is the current one), the last block padded with zeros;
        its next records start at the next block boundary. Returns once they are written; appends go on into
        the other buffers meanwhile."""
        with self._cond:
            if log_id == self._log_id:
                self._write_out()

    def read_staged(self, log_id: int, offset: int, length: int) -> tuple[int, bytes] | None:
        """For ``length`` bytes of log ``log_id`` at ``offset``: None when the file holds them all; else how many
        of them (from ``offset``) the file holds and the rest, copied from the buffers."""
        if log_id != self._log_id or offset + length <= self.written:
            return None
        with self._cond:
            written = self.written
            if log_id != self._log_id or offset + length <= written:
                return None
            on_disk = max(0, written - offset)
            at, left = offset + on_disk, length - on_disk
            parts = []
            pieces = list(self._queue)
            if self._active is not None:
                pieces.append((self._active, self._active_at, self._staged))
            for index, begin, size in pieces:  # contiguous from ``written``
                if left <= 0:
                    break
                if at < begin + size:
                    step = min(left, begin + size - at)
                    parts.append(self._buffers[index][at - begin:at - begin + step])
                    at, left = at + step, left - step
            return on_disk, b"".join(parts)

    def read(self, fd: int, log_id: int, size: int, offset: int) -> bytes:
        """``size`` bytes of log ``log_id`` at ``offset``: from the file (``fd``, a plain descriptor of it), then
        from the buffers what is not written yet."""
        staged = self.read_staged(log_id, offset, size)
        if staged is None:
            return os.pread(fd, size, offset)
        on_disk, rest = staged
        return (os.pread(fd, on_disk, offset) if on_disk else b"") + rest

    def finish(self, log_id: int | None = None) -> None:
        """Write what is staged and close the descriptor (the log ``log_id`` is sealed, or with None the logger
        is closing); nothing if ``log_id`` is not the current log."""
        with self._cond:
            if log_id is None or log_id == self._log_id:
                self._finish()

    def release(self) -> None:
        """``finish``, stop the writing thread and unmap the buffers; raises a write's OSError after that."""
        try:
            self.finish()
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join()
            for buffer in self._buffers:
                buffer.close()

    # --- under the condition's lock --------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise OSError(self._error.errno, f"an earlier direct write of this entry log failed: {self._error}")

    def _buffer(self) -> mmap.mmap:
        """The active buffer; when every buffer is queued, the first the thread gives back."""
        while self._active is None:
            self._check()
            if self._free:
                self._active = self._free.popleft()
            else:
                self._cond.wait()
        return self._buffers[self._active]

    def _queue_active(self, length: int) -> None:
        """Queue the active buffer's first ``length`` bytes (whole blocks) for the thread; the log's next bytes go
        to the next free buffer, at the block after them."""
        self._queue.append((self._active, self._active_at, length))
        self._active = None
        self._active_at = self.end = self._active_at + length
        self._staged = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="entry-log-writer", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _write_out(self) -> None:
        """Everything staged written: the active buffer's bytes, padded, queued behind the rest; returns once the
        thread wrote them all (the condition released while it waits, so appends go on)."""
        self._check()
        staged = self._staged
        if staged:
            padded = staged + (-staged) % BLOCK
            self._buffers[self._active][staged:padded] = _ZEROS[:padded - staged]
            self._queue_active(padded)
        log_id, target = self._log_id, self._active_at
        while self._log_id == log_id and self.written < target:  # a new log: this one was written (finish)
            self._check()
            self._cond.wait()
        self._check()

    def _finish(self) -> None:
        if self._fd is None:
            return
        fd = self._fd
        try:
            self._write_out()
        finally:
            self._fd = self._log_id = None
            os.close(fd)

    # --- the writing thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                pieces, fd = tuple(self._queue), self._fd
                if self._error is not None:  # the log's tail is undefined: nothing more is written to it
                    self._written_out(pieces, self._error)
                    continue
            try:
                _write_blocks(fd, [memoryview(self._buffers[index])[:size] for index, _, size in pieces], pieces[0][1])
            except OSError as exc:
                error = exc
            else:
                error = None
            with self._cond:
                self._written_out(pieces, error)

    def _written_out(self, pieces: tuple[tuple[int, int, int], ...], error: OSError | None) -> None:
        """The queue's first ``pieces`` are written (or their write failed: ``error``); under the lock. Their
        buffers are free again."""
        for _ in pieces:
            self._free.append(self._queue.popleft()[0])
        if error is None:
            self.written = pieces[-1][1] + pieces[-1][2]
        else:
            self._error = error
        self._cond.notify_all()


def _write_blocks(fd: int, views: list[memoryview], offset: int) -> None:
    """Write the views (whole blocks each, page aligned) one after another from ``offset``, in one ``pwritev``
    unless the kernel writes less at a time; the views are released."""
    length = sum(len(view) for view in views)
    try:
        done, left = 0, views
        while done < length:
            written = os.pwritev(fd, left, offset + done)
            if written <= 0 or written % BLOCK:
                raise OSError(errno.EIO, f"a direct write of {length} bytes at offset {offset} wrote "
                                         f"{done + max(written, 0)}")
            done += written
            left = unwritten(left, written)
    finally:
        for view in views:
            view.release()
