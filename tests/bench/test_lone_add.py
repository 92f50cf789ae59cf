"""bench/lone_add.py: a short run against a real bookie gives per-thread figures that add up."""
from __future__ import annotations

import threading

from bench import lone_add


def test_thread_counters_see_this_thread():
    counters = lone_add.thread_counters(lone_add.os.getpid())
    cpu, user, switches = counters[threading.get_native_id()]
    assert cpu >= user >= 0 and switches >= 0


def test_a_short_run_splits_the_bookie_cpu_by_thread():
    result = lone_add.run(adds=20, rate=200.0, idle_s=0.2)
    assert result["adds"] == 20 and result["p50_ms"] > 0
    assert abs(sum(t["cpu_us_per_add"] for t in result["threads"]) - result["cpu_us_per_add"]) <= len(result["threads"])
    assert result["wakeups_per_add"] > 0  # at least the stream's reader sleeps between lone adds
