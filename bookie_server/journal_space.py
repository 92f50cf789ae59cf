"""Zeros ahead of a journal file's records, written and made durable by a thread of their own (docs/protocol.md B7).

A group commit whose records overwrite blocks the file already has, written and durable, changes no file metadata:
its ``fdatasync`` writes the records' pages and flushes the disk's cache, with no file-system journal commit (see
``StorageConfig.journal_preallocate_bytes``). Zeros written on the commit path, unsynced, are written out by that
commit's own ``fdatasync``: one group commit in every step of records wrote the whole step (4 MiB, 10-30 ms on this
disk, in every bookie at once, since they take the same bytes; docs/measurements.md). So ``JournalSpace`` keeps the
zeros ahead of the records from a thread of its own: a step at a time (``FILL_STEP`` at most), each made durable with
an ``fdatasync`` through a descriptor of its own, while group commits go on.

The rules it keeps:

* **Zeros never land on a record.** The commit thread ``claim``s the end of the records it is about to write before
  it writes them; the filler starts every step at or past the end of everything claimed, deciding where while it
  holds the fill lock, and a claim past the zeros that exist takes the fill lock (so waits for a step in flight)
  before it looks at where they end.
* **A commit never depends on the filler.** A claim past the zeros writes zeros itself, on the commit path, unsynced
  (its ``fdatasync`` covers them), as the journal did before the filler: one step past its records while the filler
  works, the whole way ahead once it stopped. A filler that fell behind, or stopped, costs speed, never
  correctness. A disk too full for zeros leaves the records written without them.
* **A file nobody writes keeps no zeros.** The filler starts once a record is claimed past the file's start (the
  first commit to a new file writes one step itself), so an idle bookie, or a journal just rotated by the garbage
  collector, holds no preallocated space.
* **An ``fdatasync`` that fails is the journal's failure.** The filler's descriptor is its own open file
  description, so Linux reports a writeback error of the file to the commit path's ``fdatasync`` as well (an error
  is reported once to every description open when it happened); and the next ``claim`` raises it, so the journal
  stops as on its own failed ``fdatasync`` and the filler writes no more.
* ``stop`` (before the file is rotated or closed and cut to its records) ends the filler and returns where the
  zeros end.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

FILL_STEP = 1 << 20  # the filler's largest step: a commit meeting it in writeback waits for this much at most
_ZEROS = bytes(FILL_STEP)


class JournalSpace:
    """The zeros ahead of the records of the journal file at ``path`` (``size`` bytes now, all of them records),
    kept ``ahead`` bytes past the records claimed (see the module docstring). ``sync`` is ``os.fdatasync`` (a test
    may make it fail); ``background=False`` leaves every zero to the commit path (no thread)."""

    def __init__(self, path: Path, size: int, ahead: int, sync: Callable[[int], None] = os.fdatasync,
                 background: bool = True) -> None:
        self._ahead = ahead
        self._step = min(FILL_STEP, ahead)
        self._sync = sync
        self._cond = threading.Condition()  # guards the fields below
        self._fill = threading.Lock()  # held while zeros are written, by the filler or by a claim past them
        self._allocated = size  # zeros (or records) up to here
        self._claimed = size  # the end of the records written or being written
        self._size = size  # the file's records when it was given: the filler starts once a record is claimed past it
        self._stopping = False
        self._finished = not (ahead and background)  # the filler returned (or there is none)
        self._failure: OSError | None = None  # the filler's fdatasync failed
        self.inline_bytes = 0  # zeros the commit path had to write itself (the filler was behind)
        self._fd = -1
        self._thread: threading.Thread | None = None
        if ahead and background:
            self._fd = os.open(path, os.O_WRONLY)
            self._thread = threading.Thread(target=self._run, name="bookie-journal-zeros", daemon=True)
            self._thread.start()

    @property
    def allocated(self) -> int:
        with self._cond:
            return self._allocated

    def claim(self, offset: int, end: int, write_fd: int) -> None:
        """Before the commit thread writes records from ``offset`` (past every record written so far) to ``end``: make
        sure the file has zeros up to there, writing them itself (through ``write_fd``, unsynced, never before
        ``offset``) past what the filler made. Raises the filler's failed ``fdatasync`` (the journal then stops)."""
        if not self._ahead:
            return
        with self._cond:
            if self._failure is not None:
                raise self._failure
            self._claimed = max(self._claimed, end)
            if end <= self._allocated:
                if self._allocated - end < self._ahead:
                    self._cond.notify_all()
                return
        with self._fill:  # past the zeros: a step in flight ends first, then this thread writes what is missing
            with self._cond:
                if end <= self._allocated:
                    return
                start = max(self._allocated, offset)  # (zeros that fell short, a full disk, end before records)
            # with a filler at work, one step past the records (it goes on from there); else the whole way ahead
            reached = _write_zeros(write_fd, start, end + (self._ahead if self._finished else self._step))
            self.inline_bytes += reached - start
            with self._cond:
                self._allocated = max(self._allocated, reached)
                self._cond.notify_all()

    def stop(self) -> int:
        """End the filler (waiting for a step in flight) and close its descriptor; where the zeros end."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with self._cond:
            return self._allocated

    def settled(self, timeout: float) -> bool:
        """Wait until the filler has nothing to do (the zeros ``ahead`` past the records, or it stopped); for tests."""
        with self._cond:
            return self._cond.wait_for(lambda: self._idle() or self._finished, timeout)

    # --- the filler thread ------------------------------------------------------------
    def _idle(self) -> bool:
        """Nothing to do: no record claimed yet (a file nobody writes keeps no zeros), or the zeros far enough ahead."""
        return self._claimed == self._size or self._allocated - self._claimed >= self._ahead

    def _run(self) -> None:
        try:
            self._fill_ahead()
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _fill_ahead(self) -> None:
        while True:
            with self._cond:
                self._cond.notify_all()  # (``settled``)
                while not self._stopping and self._idle():
                    self._cond.wait()
                if self._stopping:
                    return
            with self._fill:
                with self._cond:
                    if self._stopping:
                        return
                    start = max(self._allocated, self._claimed)  # never below a record claimed
                try:
                    reached = _write_zeros(self._fd, start, start + self._step)
                    if reached < start + self._step:  # the disk is too full: the commit path goes on without
                        with self._cond:
                            self._allocated = max(self._allocated, reached)
                        return
                    self._sync(self._fd)
                except OSError as exc:
                    log.error("journal zeros: fdatasync failed (%s); the journal stops at its next group commit", exc)
                    with self._cond:
                        self._failure = exc
                    return
                with self._cond:
                    self._allocated = max(self._allocated, start + self._step)


def _write_zeros(fd: int, start: int, target: int) -> int:
    """Zeros from ``start`` to ``target`` (unsynced); how far they reached (short of ``target`` when the disk is
    too full: logged, not raised)."""
    position = start
    try:
        while position < target:
            position += os.pwrite(fd, _ZEROS[:min(FILL_STEP, target - position)], position)
    except OSError as exc:
        log.warning("journal: cannot preallocate %d bytes at offset %d (%s); writing without", target - position,
                    position, exc)
    return position
