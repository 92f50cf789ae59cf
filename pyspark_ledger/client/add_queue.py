"""The adds an add stream has queued and not yet written, and which of them leave together as one AddBatch.

Small adds are joined, up to ``max_batch_bytes``, when the window (``BatchWindow``, docs/protocol.md W10) has a
place; a large add (``WRITE_ALONE_BYTES`` or more) leaves on its own, so that its bytes are not copied once more
per bookie into a joined batch, and the window never holds it back. Not thread-safe: the stream's lock guards it.
"""
from __future__ import annotations

from pyspark_ledger.client.batch_window import BatchWindow

WRITE_ALONE_BYTES = 64 * 1024  # adds this large are not joined into a batch (one copy less per bookie)


class AddQueue:
    """Encoded adds in the order queued (see the module docstring)."""

    __slots__ = ("_frames", "_bytes", "_large", "_max_batch_bytes")

    def __init__(self, max_batch_bytes: int) -> None:
        self._frames: list[bytes] = []
        self._bytes = 0
        self._large = 0  # how many queued adds are WRITE_ALONE_BYTES or larger
        self._max_batch_bytes = max_batch_bytes

    def __bool__(self) -> bool:
        return bool(self._frames)

    def extend(self, frames: list[bytes]) -> None:
        size = sum(map(len, frames))
        if size >= WRITE_ALONE_BYTES:
            self._large += sum(1 for frame in frames if len(frame) >= WRITE_ALONE_BYTES)
        self._frames.extend(frames)
        self._bytes += size

    def clear(self) -> None:
        self._frames, self._bytes, self._large = [], 0, 0

    def take(self, window: BatchWindow) -> bytes | None:
        """The next batch to write, if the window lets it go (noted in the window as sent), else None."""
        queue = self._frames
        if not queue:
            return None
        if not self._large and self._bytes <= self._max_batch_bytes:
            if window.full:
                return None
            self._frames, self._bytes = [], 0
            window.sent(len(queue), False)
            return queue[0] if len(queue) == 1 else b"".join(queue)
        if not window.may_send(len(queue[0]) >= WRITE_ALONE_BYTES):
            return None
        size = count = 0
        for frame in queue:
            if count and (size + len(frame) > self._max_batch_bytes or len(frame) >= WRITE_ALONE_BYTES):
                break
            size += len(frame)
            count += 1
            if len(frame) >= WRITE_ALONE_BYTES:
                self._large -= 1
                break
        self._frames, self._bytes = queue[count:], self._bytes - size
        window.sent(count, count == 1 and len(queue[0]) >= WRITE_ALONE_BYTES)
        return queue[0] if count == 1 else b"".join(queue[:count])
