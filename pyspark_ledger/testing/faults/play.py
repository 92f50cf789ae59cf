"""Playing a fault schedule in real time: each step applied at its start, healed at its end.

``play(steps, apply, log, duration_s)``: ``apply(step)`` injects a step's fault and returns the callable that
heals it; ``log.started(step, error=None)`` records a step (returning its record) and ``log.healed(record)``
its end. A step that cannot be applied, or healed, is recorded with its error and the schedule goes on.
Returns once every step has healed and ``duration_s`` has passed since the start.
"""
from __future__ import annotations

import heapq
import time
from typing import Callable, Sequence

from pyspark_ledger.errors import LedgerError


def play(steps: Sequence, apply: Callable[[object], Callable[[], None]], log, duration_s: float) -> None:
    begin = time.monotonic()
    queue: list = [(step.at_s, 0, index, step, None) for index, step in enumerate(steps)]
    heapq.heapify(queue)
    while queue:
        at, _, index, step, started = heapq.heappop(queue)
        delay = begin + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if started is None:
            try:
                heal = apply(step)
            except (LedgerError, OSError) as exc:
                log.started(step, error=f"{type(exc).__name__}: {exc}")
                continue
            heapq.heappush(queue, (step.ends_s, 1, index, step, (log.started(step), heal)))
        else:
            record, heal = started
            try:
                heal()
            except (LedgerError, OSError) as exc:
                record.error = f"heal failed: {type(exc).__name__}: {exc}"
            log.healed(record)
    remaining = begin + duration_s - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
