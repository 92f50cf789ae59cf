"""The one compare-and-set loop that changes a stored value (ledger metadata, stream records).

In the spirit of BookKeeper's MetadataUpdateLoop: take the value as last
known (or read it), ask ``needs_update`` whether it still needs changing --
when it does not, that stored value is the result, whoever wrote it --
compute the new value with ``transform``, check the transition, and
compare-and-set it on the version read. A lost compare-and-set
(``MetadataVersionConflictError``) reads the value again and decides anew,
after a back-off, until the ``RetryPolicy`` runs out; then
``MetadataVersionConflictError`` names what was being changed and how many
attempts were made. Any other error (from the store, from ``needs_update``,
``transform`` or the check) stops the loop and propagates as it is: callers
stop the loop on purpose by raising from ``needs_update``.

Store-generic: the caller gives the ``read`` and ``compare_and_set``
functions of its kind of value (``client.metadata_update`` for ledgers,
``log.stream_store`` for streams).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterator, TypeVar

from pyspark_ledger.errors import InvalidConfigurationError, MetadataVersionConflictError
from pyspark_ledger.metadata.store import Versioned

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a compare-and-set loop retries.

    ``attempts`` compare-and-sets at most. Before the n-th retry (n = 1, 2, ...) it sleeps
    ``min(backoff_cap_s, backoff_base_s * 2 ** (n - 1))`` scaled by a jitter factor in [0.5, 1]
    (so that clients that lost to each other do not collide again in step). ``deadline_s``
    (optional) bounds the whole loop on ``clock``. ``sleep``, ``clock`` and ``jitter`` (a
    function returning a float in [0, 1]) are injectable for tests.
    """

    attempts: int = 20
    backoff_base_s: float = 0.002
    backoff_cap_s: float = 0.2
    deadline_s: float | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    jitter: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool) or self.attempts < 1:
            raise InvalidConfigurationError(f"RetryPolicy.attempts must be an integer >= 1, got {self.attempts!r}")
        for name in ("backoff_base_s", "backoff_cap_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidConfigurationError(f"RetryPolicy.{name} must be a number of seconds >= 0, got {value!r}")
        if self.backoff_cap_s < self.backoff_base_s:
            raise InvalidConfigurationError(f"RetryPolicy.backoff_cap_s ({self.backoff_cap_s}) must be at least "
                                            f"backoff_base_s ({self.backoff_base_s})")
        deadline = self.deadline_s
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))
                                     or not deadline > 0):
            raise InvalidConfigurationError(f"RetryPolicy.deadline_s must be a number of seconds > 0 or None, "
                                            f"got {self.deadline_s!r}")

    def delay(self, retry: int) -> float:
        """The pause before retry number ``retry`` (1 for the first retry); never above ``backoff_cap_s``."""
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * 2 ** min(retry - 1, 60))
        return ceiling * (0.5 + 0.5 * min(1.0, max(0.0, self.jitter())))

    def tries(self) -> Iterator[int]:
        """The attempt numbers 1, 2, ... ``attempts`` of a whole operation that starts again after a conflict,
        sleeping ``delay(n)`` on ``sleep`` before retry n. It stops early, without sleeping, when that pause
        would end past ``deadline_s``. The caller returns from inside the loop on success and raises its own
        error, naming what kept conflicting, after it::

            for attempt in policy.tries():
                ...  # try once; ``continue`` on a conflict
            raise MetadataError(f"... kept changing ({policy.attempts} attempts)")
        """
        started = self.clock()
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                pause = self.delay(attempt - 1)
                if self.deadline_s is not None and self.clock() + pause - started > self.deadline_s:
                    return
                self.sleep(pause)
            yield attempt


@dataclass(frozen=True, slots=True)
class Updated(Generic[T]):
    """What the loop ended with: the stored value and version, and whether this loop wrote it."""

    stored: Versioned[T]
    written: bool
    attempts: int


def update_loop(what: str, read: Callable[[], Versioned[T]], compare_and_set: Callable[[T, int], int], *,
                needs_update: Callable[[T], bool], transform: Callable[[T], T | None],
                check: Callable[[T, T], None] | None = None, policy: RetryPolicy = RetryPolicy(),
                current: Versioned[T] | None = None) -> Updated[T]:
    """Change the value ``read`` returns until a compare-and-set sticks (see the module docstring).

    ``what`` names the value in errors ("ledger 7", "stream 'clicks'"). ``current`` is the value as the
    caller last knew it (read first if None). ``transform`` may return None for "nothing to change after
    all". ``check(before, after)`` raises if ``after`` may not follow ``before``.
    """
    started = policy.clock()
    stored = read() if current is None else current
    for attempt in range(1, policy.attempts + 1):
        if not needs_update(stored.value):
            return Updated(stored, False, attempt)
        after = transform(stored.value)
        if after is None:
            return Updated(stored, False, attempt)
        if check is not None:
            check(stored.value, after)
        try:
            return Updated(Versioned(after, compare_and_set(after, stored.version)), True, attempt)
        except MetadataVersionConflictError:
            pass
        if attempt == policy.attempts:
            break
        pause = policy.delay(attempt)
        if policy.deadline_s is not None and policy.clock() + pause - started > policy.deadline_s:
            raise MetadataVersionConflictError(
                f"changing {what} lost {attempt} compare-and-sets in a row within its {policy.deadline_s} s "
                "deadline: too many concurrent writers of it; try again")
        policy.sleep(pause)
        stored = read()
    raise MetadataVersionConflictError(f"changing {what} lost {policy.attempts} compare-and-sets in a row: too many "
                                       "concurrent writers of it; try again")
