"""Issue 12 part 2: a bookie gives memory back. The trimmer trims after a burst of adds, and also when the
resident size has crept more than its slack above the start's plus what is in flight (many moderate batches
over many streams, each leaving free memory in its own malloc arena)."""
from __future__ import annotations

import itertools
import threading

from bookie_server import memory
from bookie_server.limits import Budget
from tests.waiting import wait_until

MIB = 2**20


def test_over_slack_only_past_the_start_plus_in_flight_plus_slack():
    for resident, floor, in_flight, slack in itertools.product([0, 50, 100, 179, 180, 181, 400], [50], [0, 30],
                                                               [100]):
        expected = resident > 0 and resident > floor + in_flight + slack
        assert memory.over_slack(resident, floor, in_flight, slack) is expected, (resident, in_flight)
    assert not memory.over_slack(0, 0, 0, 0)  # no /proc: nothing is known, nothing is done


def test_resident_bytes_reads_this_process():
    assert 1 * MIB < memory.resident_bytes() < 64 * 1024 * MIB


def _trimmer(monkeypatch, resident: list[int], budget: Budget) -> tuple[memory.BurstTrimmer, threading.Event]:
    trimmed = threading.Event()
    monkeypatch.setattr(memory, "resident_bytes", lambda: resident[0])
    monkeypatch.setattr(memory, "give_back_memory", lambda: True)
    trimmer = memory.BurstTrimmer(budget, quiet_s=0.0, min_interval_s=0.0, check_s=0.02, rss_slack=100 * MIB,
                                  on_trim=trimmed.set)
    return trimmer, trimmed


def test_memory_that_crept_up_without_a_burst_is_given_back(monkeypatch):
    resident, budget = [200 * MIB], Budget(1024 * MIB)
    trimmer, trimmed = _trimmer(monkeypatch, resident, budget)  # started at 200 MiB
    try:
        assert not trimmed.wait(0.3), "trimmed with nothing over the slack"
        budget.try_take(150 * MIB)
        resident[0] = 420 * MIB  # 200 + 150 in flight + 70: within the slack
        assert not trimmed.wait(0.3), "trimmed memory the bookie holds for requests in flight"
        budget.give_back(150 * MIB)  # the requests were answered, the memory stayed
        wait_until(trimmed.is_set, timeout=5, what="a trim of the memory left behind")
    finally:
        trimmer.stop()


def test_a_burst_is_trimmed_once_the_bookie_is_quiet(monkeypatch):
    resident, budget = [200 * MIB], Budget(1024 * MIB)
    trimmer, trimmed = _trimmer(monkeypatch, resident, budget)
    try:
        budget.try_take(memory.TRIM_THRESHOLD)
        budget.give_back(memory.TRIM_THRESHOLD)
        trimmer.bytes_freed()
        wait_until(trimmed.is_set, timeout=5, what="a trim after the burst")
    finally:
        trimmer.stop()
