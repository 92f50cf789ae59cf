"""A bookie process's Python heap: start-up objects kept out of full collections, and the collector's pauses.

CPython's cyclic garbage collector stops every thread of the process while it runs. Its full (generation 2)
passes walk every tracked object, and a started bookie holds tens of thousands of them that live as long as the
process: modules, gRPC and protobuf machinery, the replayed ledger states. On the project's 2-core machines
such a pass took 38-63 ms every few seconds of paced adds; the 3 bookies of an ensemble receive the same adds,
so they reach it at nearly the same moment, and with Qa=2 every add made meanwhile waited for it
(docs/measurements.md, "Python's full collections in the bookies").

``freeze_start_up_objects`` runs one full collection (so that no start-up garbage is kept) and then moves every
object left into the permanent generation (``gc.freeze``), which later passes skip. It is called once, by the
process that owns the bookie (``bookie_server.__main__``), after the start-up: objects made later, e.g. the
states of ledgers created since, are still collected as usual. ``watch_collections`` reports each pass's
generation and duration (the bookie's ``python_gc_pause_seconds`` metric).
"""
from __future__ import annotations

import gc
import time
from typing import Callable

PauseListener = Callable[[int, float], None]


def freeze_start_up_objects() -> int:
    """Collect, then freeze every object left; returns how many objects the permanent generation holds."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def watch_collections(on_pause: PauseListener) -> Callable[[], None]:
    """Call ``on_pause(generation, seconds)`` after each pass of the collector; returns the function that stops it.

    ``on_pause`` runs inside the collector's callback: it must be quick and must not raise."""
    started: list[float] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            seconds = time.perf_counter() - started.pop()
            try:
                on_pause(int(info.get("generation", -1)), seconds)
            except Exception:  # noqa: BLE001 - a listener's bug must not break the collector
                pass

    gc.callbacks.append(callback)

    def stop() -> None:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    return stop
