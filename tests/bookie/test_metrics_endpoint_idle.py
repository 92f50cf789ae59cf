"""Issue 16 (lone adds): the /metrics endpoint's thread sleeps until a scrape arrives. It used to wake every
50 ms to look for a stop request (about 20 wake-ups a second on an idle bookie); it now blocks in accept and
``stop_http`` wakes it with a connection. It still serves scrapes and still stops promptly."""
from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from bookie_server.metrics import BookieMetrics

IDLE_S = 1.0


def _wakeups(native_id: int) -> int:
    """How many times this thread went to sleep voluntarily so far (each one ended in a wake-up)."""
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_the_endpoint_thread_does_not_wake_while_idle_and_still_serves_and_stops():
    metrics = BookieMetrics()
    port = metrics.serve_http("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert b"bookie_inflight_adds" in answer.read()
        thread = metrics._http_thread
        time.sleep(0.2)  # the scrape's own wake-ups are over
        before = _wakeups(thread.native_id)
        time.sleep(IDLE_S)
        assert _wakeups(thread.native_id) - before <= 2  # polling every 50 ms made it ~20
    finally:
        started = time.monotonic()
        metrics.stop_http()
    assert time.monotonic() - started < 5.0
    assert not thread.is_alive()
    metrics.stop_http()  # idempotent


def test_stop_right_after_start_does_not_hang():
    for _ in range(5):
        metrics = BookieMetrics()
        metrics.serve_http("127.0.0.1", 0)
        started = time.monotonic()
        metrics.stop_http()
        assert time.monotonic() - started < 5.0
