"""How many AddBatches an add stream keeps unanswered (docs/protocol.md W10), as a pure counter.

A bookie takes an add stream's messages one at a time: each costs it a fixed
share of gRPC work and thread hand-offs, however few adds it carries. Written
as fast as adds arrive (one add per message at a paced 1,000/s), messages pile
up in a bookie that falls behind for a moment, and it works through them one
by one, slower than they come. So an add stream keeps at most ``limit``
batches of small adds unanswered; adds queued meanwhile leave together in the
next batch once an answer frees a place. By default the limit follows the
stream's transport (``batches_in_flight_for``): 1 on a gRPC stream (at a paced
1,000 adds/s it cut the p99 from tens of milliseconds to under 10 and did not
lower the rate of adds sent as fast as allowed; docs/measurements.md, "One
AddBatch in flight per add stream"), 2 on a framed stream (docs/protocol.md
W11), whose bookie hands the frames one receive brought as one batch: the next
add then goes while one is answered, instead of waiting a round trip, and a
lagging bookie still sees at most two messages of this stream, both taken
together (docs/measurements.md, "Two AddBatches in flight on a framed
stream"). A large add (written alone, see ``add_queue.WRITE_ALONE_BYTES``) is
never held back: its bytes, not its message, are its cost, and holding it
would only leave the link idle.

The window counts in adds: a batch is answered once as many adds were answered
on the stream as were sent up to and including it. A bookie answers a stream's
adds in the order it stores them, which is the order they were sent; an answer
that comes early (a refusal answered at once) can only open the window early.
"""
from __future__ import annotations

from collections import deque

from pyspark_ledger.errors import InvalidConfigurationError

GRPC_BATCHES_IN_FLIGHT = 1
FRAMED_BATCHES_IN_FLIGHT = 2
DEFAULT_BATCHES_IN_FLIGHT = None  # the limit follows the stream's transport (``batches_in_flight_for``)
MAX_BATCHES_IN_FLIGHT = 1024


def check_batches_in_flight(value: object, name: str = "add_batches_in_flight") -> int | None:
    """``value`` if it is an allowed window (1 to ``MAX_BATCHES_IN_FLIGHT``, or None: by the stream's transport),
    else InvalidConfigurationError."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCHES_IN_FLIGHT:
        raise InvalidConfigurationError(
            f"{name} must be an integer from 1 to {MAX_BATCHES_IN_FLIGHT} (AddBatches of small adds an add "
            f"stream keeps unanswered), or None to follow the stream's transport, got {value!r}")
    return value


def batches_in_flight_for(chosen: int | None, framed: bool) -> int:
    """The window of a stream: ``chosen`` if given, else ``FRAMED_BATCHES_IN_FLIGHT`` on a framed stream
    (docs/protocol.md W11) and ``GRPC_BATCHES_IN_FLIGHT`` on a gRPC one."""
    if chosen is not None:
        return chosen
    return FRAMED_BATCHES_IN_FLIGHT if framed else GRPC_BATCHES_IN_FLIGHT


class BatchWindow:
    """The unanswered batches of one add stream; ``may_send`` says whether the next may go."""

    __slots__ = ("limit", "_ends", "_held", "_sent", "_answered")

    def __init__(self, limit: int = GRPC_BATCHES_IN_FLIGHT) -> None:
        if limit is None:
            raise InvalidConfigurationError("a BatchWindow needs a limit: see batches_in_flight_for")
        self.limit = check_batches_in_flight(limit)
        self._ends: deque[tuple[int, bool]] = deque()  # (adds sent up to and including the batch, counted)
        self._held = 0  # unanswered batches that count against the limit
        self._sent = 0
        self._answered = 0

    @property
    def unanswered(self) -> int:
        """Batches sent and not yet answered, large ones included."""
        return len(self._ends)

    @property
    def full(self) -> bool:
        """True while a batch of small adds must wait."""
        return self._held >= self.limit

    def may_send(self, large: bool) -> bool:
        """Whether a batch may be written now: always for a large add, else while the window has room."""
        return large or self._held < self.limit

    def sent(self, adds: int, large: bool) -> None:
        """A batch of ``adds`` adds was written (``large``: one add written alone, not counted)."""
        if adds < 1:
            raise ValueError(f"a batch holds at least one add, got {adds}")
        self._sent += adds
        self._ends.append((self._sent, not large))
        if not large:
            self._held += 1

    def answered(self, adds: int) -> bool:
        """``adds`` more adds of the stream were answered; True if a counted batch left the window."""
        if adds < 0:
            raise ValueError(f"answers cannot be negative, got {adds}")
        self._answered = min(self._answered + adds, self._sent)  # answers beyond the sent adds count for nothing
        freed = False
        ends = self._ends
        while ends and ends[0][0] <= self._answered:
            _, counted = ends.popleft()
            if counted:
                self._held -= 1
                freed = True
        return freed
