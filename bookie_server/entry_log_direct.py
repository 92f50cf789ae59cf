"""The current entry log written around the page cache, each block once (docs/protocol.md B9).

``DirectWriter`` copies each batch of records into an aligned buffer of its own (``STAGE_BYTES``); a full
buffer is written with ``O_DIRECT``, as whole blocks, by a thread of the writer's own while appends fill a
second buffer. Bytes that do not fill a buffer stay there (*staged*) until it fills, a sync needs them
(``flush``), or the log is left (``begin``, ``finish``): then they are written with the rest of their last
block zeroed, and the log's next records start at the next block boundary, so no block is ever written twice.
Those zeros are padding, which every reader of an entry log steps over (``padding_end``). Staged bytes, and
those of a buffer being written, are read from the buffers (``read_staged``).

Why: beside Spark's JVM the page-cache copy of a buffered write (page allocation, the copy, writeback) cost a
bookie several times what it costs alone (docs/measurements.md, "The Spark write's bookies: copies that slow
down beside Spark"); a direct write copies once, into memory that stays mapped, and hands the device whole
blocks. Staging keeps small adds off the device: a batch of one 1 KiB entry is a copy into memory; and the
thread keeps the adds from waiting for the device, as the page cache's writeback did.

Staged bytes are not in the file: a bookie killed before they were written loses them there, which costs
nothing, because an entry-log body is relied on only after a sync (docs/protocol.md B1, B2): a journal
reference to a body is written after the entry log's sync, and a body copied into the journal is replayed
from it.

Locking: every method holds the writer's condition; ``read_staged`` takes it only for bytes at or past
``written``, the end of what the file holds, which only grows within a log and is set after the bytes are
written. A sync hands its staged bytes over as the thread's buffers are handed over, then writes them itself with
the condition released, so appends go on into the other buffer while it waits for the device.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path
from typing import Sequence

from bookie_server.files import Buffer

BLOCK = 4096  # the unit of a direct write's offset and length, and of the padding rule (B9)
STAGE_BYTES = 2 * 1024 * 1024  # the aligned buffer: written whenever full
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

    Two aligned buffers: appends fill the *active* one; a full one is handed to a thread of the writer's own,
    which writes it while appends fill the other (an append waits only when both are full), so an add never
    waits for the device unless the disk is slower than the adds. Methods raise OSError once a write failed
    (this writer's thread's or their own); the log's tail is then undefined (the caller stops appending)."""

    def __init__(self, stage_bytes: int | None = None) -> None:
        stage_bytes = STAGE_BYTES if stage_bytes is None else stage_bytes
        if stage_bytes < BLOCK or stage_bytes % BLOCK:
            raise ValueError(f"the direct-write buffer must be a positive multiple of {BLOCK} bytes")
        self._cond = threading.Condition()
        self._buffers = (mmap.mmap(-1, stage_bytes), mmap.mmap(-1, stage_bytes))  # page aligned
        self._capacity = stage_bytes
        self._fd: int | None = None
        self._log_id: int | None = None
        self._thread: threading.Thread | None = None  # started at the first hand-off
        self._stopping = False
        self._error: OSError | None = None
        self.written = 0  # the file holds the log's bytes below this offset (a block boundary)
        self._writing: int | None = None  # the buffer the thread writes: the log's bytes from ``written`` on
        self._writing_len = 0  # how many of its bytes: the whole buffer, or a sync's staged bytes padded
        self._caller_writes = False  # the buffer being written is a sync's, written by the syncing thread
        self._active = 0  # the buffer appends fill: the log's bytes from ``_active_at`` on
        self._active_at = 0  # ``written``, or ``written + _writing_len`` while a buffer is being written
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
        A buffer that fills is handed to the writing thread."""
        with self._cond:
            self._check()
            start = self.end
            capacity, pos = self._capacity, self._staged
            buffer = self._buffers[self._active]
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
                    step = min(size - taken, capacity - pos)
                    buffer[pos:pos + step] = view[taken:taken + step]
                    pos += step
                    taken += step
                    if pos == capacity:
                        self._staged, self.end = pos, self._active_at + pos
                        self._hand_off()
                        pos, buffer = self._staged, self._buffers[self._active]
            self._staged, self.end = pos, self._active_at + pos
            if self.end - start != nbytes:
                raise ValueError(f"records of {self.end - start} bytes staged, {nbytes} announced")
            return start

    def flush(self, log_id: int) -> None:
        """Write every staged byte of log ``log_id`` (if it is the current one), the last block padded with zeros;
        its next records start at the next block boundary. Returns once they are written; appends go on into
        the other buffer meanwhile."""
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
            if self._writing is not None and at < self._active_at:  # in the buffer being written
                step = min(left, self._active_at - at)
                parts.append(self._buffers[self._writing][at - written:at - written + step])
                at, left = at + step, left - step
            if left > 0 and at >= self._active_at:
                begin = at - self._active_at
                parts.append(self._buffers[self._active][begin:min(begin + left, self._staged)])
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

    def _wait_written(self) -> None:
        while self._writing is not None:
            self._cond.wait()
        self._check()

    def _hand_off(self) -> None:
        """The active buffer is full: hand it to the thread (once the other one is written) and fill the other."""
        self._wait_written()
        if self._staged < self._capacity:  # a sync handed it off while this waited (its lock was released)
            return
        self._start_write(self._capacity)

    def _start_write(self, length: int, by_caller: bool = False) -> None:
        """Give the active buffer's first ``length`` bytes (whole blocks) to the thread, or with ``by_caller`` mark
        them as written by the caller; appends fill the other buffer. No write is under way (``_wait_written``)."""
        self._writing, self._writing_len, self._active = self._active, length, 1 - self._active
        self._active_at = self.end = self.written + length
        self._staged = 0
        self._caller_writes = by_caller
        if by_caller:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="entry-log-writer", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _write_out(self) -> None:
        """Everything staged written: the buffer in the thread's hands, then the active one's bytes, padded, by
        this caller with the lock released (held once here), so appends go on into the other buffer."""
        self._wait_written()
        staged = self._staged
        if not staged:
            return
        padded = staged + (-staged) % BLOCK
        buffer = self._buffers[self._active]
        buffer[staged:padded] = _ZEROS[:padded - staged]
        fd, offset = self._fd, self.written
        self._start_write(padded, by_caller=True)
        self._cond.release()  # held once (flush, finish, begin, release)
        try:
            _write_blocks(fd, buffer, padded, offset)
        except OSError as exc:
            error = exc
        else:
            error = None
        finally:
            self._cond.acquire()
        self._written_out(padded, error)
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
                while (self._writing is None or self._caller_writes) and not self._stopping:
                    self._cond.wait()
                if self._writing is None or self._caller_writes:
                    return
                buffer, fd, offset, length = self._buffers[self._writing], self._fd, self.written, self._writing_len
            try:
                _write_blocks(fd, buffer, length, offset)
            except OSError as exc:
                error = exc
            else:
                error = None
            with self._cond:
                self._written_out(length, error)

    def _written_out(self, length: int, error: OSError | None) -> None:
        """The buffer being written is written (or its write failed: ``error``); under the lock."""
        if error is None:
            self.written += length
        else:
            self._error = error
        self._writing = None
        self._caller_writes = False
        self._cond.notify_all()


def _write_blocks(fd: int, buffer: mmap.mmap, length: int, offset: int) -> None:
    """Write ``buffer[:length]`` (whole blocks) at ``offset``."""
    view = memoryview(buffer)
    try:
        done = 0
        while done < length:
            part = view[done:length]
            try:
                written = os.pwrite(fd, part, offset + done)
            finally:
                part.release()
            if written <= 0 or written % BLOCK:
                raise OSError(errno.EIO, f"a direct write of {length} bytes at offset {offset} wrote "
                                         f"{done + max(written, 0)}")
            done += written
    finally:
        view.release()
