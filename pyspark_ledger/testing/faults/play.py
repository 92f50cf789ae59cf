"""Playing a fault schedule in real time: each step applied at its start, healed at its end.

``play(steps, apply, log, duration_s)``: ``apply(step)`` injects a step's fault and returns the callable that
heals it; ``log.started(step, error=None)`` records a step (returning its record, stamped as the apply begins)
and ``log.healed(record)`` its end (once the heal returned). A step that cannot be applied, or healed, is
recorded with its error and the schedule goes on. Returns once every step has healed and ``duration_s`` has
passed since the start.

Each step plays on a thread of its own, so an action that takes long -- restarting a ZooKeeper server until it
serves, a bookie until it listens, the writer-pause hook recovering a ledger while ZooKeeper is down -- delays
only its own step. (Played one after the other, the writer-pause hook's recovery, retrying against a paused
ZooKeeper, held up the heal of that very pause for 7-10 s: docs/jepsen.md, "Found".) The steps of one host
that act on its processes still run one after the other: a step waits until the one before it on that host
has healed (a second ZooKeeper kill waits for the restart of the first, which may outlast its scheduled end).
Network steps (partitions, delay, loss, resets) have their own turn per host, since they touch only routes
or proxy rules, which the ``Network`` implementations change from any thread: the namespace schedule may cut
a bookie while it is paused. An error other than ``LedgerError``/``OSError`` in a step is raised from
``play`` once every step has ended.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.faults import schedule as sched


NETWORK_KINDS = (sched.PARTITION, sched.ONE_WAY, sched.DELAY, sched.LOSS, sched.RESET)


def play(steps: Sequence, apply: Callable[[object], Callable[[], None]], log, duration_s: float) -> None:
    begin = time.monotonic()
    crashes: list[BaseException] = []
    turns = {_turn(step): threading.Lock() for step in steps}
    threads = [threading.Thread(target=_play_step, args=(begin, step, apply, log, crashes, turns[_turn(step)]),
                                name=f"fault-{index}-{step.kind}", daemon=True) for index, step in enumerate(steps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if crashes:
        raise crashes[0]
    remaining = begin + duration_s - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def _turn(step) -> tuple[str, bool]:
    """The steps that must not overlap: those of one host, its network's apart from its processes'."""
    return step.target, step.kind in NETWORK_KINDS


def _play_step(begin: float, step, apply, log, crashes: list[BaseException], turn: threading.Lock) -> None:
    try:
        _sleep_until(begin + step.at_s)
        with turn:   # the host's step before this one has healed (it may have outlasted its scheduled end)
            record = log.started(step)
            try:
                heal = apply(step)
            except (LedgerError, OSError) as exc:
                record.error = f"{type(exc).__name__}: {exc}"
                return
            _sleep_until(begin + step.ends_s)   # at once if applying took longer than the step lasts
            try:
                heal()
            except (LedgerError, OSError) as exc:
                record.error = f"heal failed: {type(exc).__name__}: {exc}"
            log.healed(record)
    except BaseException as exc:  # noqa: BLE001 - raised by play() once every step ended
        crashes.append(exc)


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)
