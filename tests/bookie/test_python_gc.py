"""The bookie's start-up heap is frozen out of later garbage collections (``bookie_server.python_gc``)."""
from __future__ import annotations

import gc

from bookie_server.python_gc import freeze_startup_heap


def test_what_is_alive_at_start_is_frozen_and_garbage_is_collected_first():
    class Cycle:
        pass
    garbage = Cycle()
    garbage.me = garbage  # a reference cycle: only the collector frees it
    collected = []
    gc.callbacks.append(lambda phase, info: collected.append(info["collected"]) if phase == "stop" else None)
    del garbage
    try:
        frozen = freeze_startup_heap()
        assert frozen == gc.get_freeze_count() > 1000  # modules and the like
        assert sum(collected) >= 1  # the cycle was collected before the freeze, not frozen with the rest
    finally:
        gc.callbacks.pop()
        gc.unfreeze()  # give this test process its ordinary collector back
