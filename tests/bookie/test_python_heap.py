"""Issue 16 (paced p99): a bookie freezes its start-up objects so that Python's full collections, which stop every
thread, skip them; the collector's passes are in the metrics (``bookie_server.python_heap``)."""
from __future__ import annotations

import gc

from bookie_server.python_heap import freeze_start_up_objects, watch_collections

from .conftest import KEY, entry, scrape, wait_until


def test_a_started_bookie_has_frozen_its_start_up_objects_and_reports_the_collectors_passes(make_bookie,
                                                                                            client_for):
    bookie = make_bookie().start()
    samples = scrape(bookie.metrics_url)
    assert samples["bookie_python_frozen_objects"] >= 10_000  # modules, gRPC, protobuf, storage: tens of thousands
    with client_for(bookie).add_stream(max_inflight=64) as stream:
        futures = [stream.add(7, entry_id, KEY, entry(7, entry_id)) for entry_id in range(3_000)]
        assert all(future.result(30).ok for future in futures)

    def passes() -> float:
        return scrape(bookie.metrics_url).get('bookie_python_gc_pause_seconds_count{generation="0"}', 0.0)
    wait_until(lambda: passes() > 0, timeout=10)  # 3,000 adds allocate far more than a young pass's 700 objects


def test_freezing_keeps_the_objects_alive_but_out_of_later_passes():
    try:
        kept = [[index] for index in range(1_000)]  # tracked containers made before the freeze
        frozen = freeze_start_up_objects()
        assert frozen == gc.get_freeze_count() >= len(kept)
        scanned = {id(item) for item in gc.get_objects(generation=2)}  # what a full pass would walk
        assert all(gc.is_tracked(item) and id(item) not in scanned for item in kept)
        garbage = []
        garbage.append(garbage)  # a cycle made after the freeze is still collected
        del garbage
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()


def test_watch_collections_reports_each_pass_and_stops():
    seen: list[tuple[int, float]] = []
    stop = watch_collections(lambda generation, seconds: seen.append((generation, seconds)))
    try:
        gc.collect(1)
        gc.collect()
    finally:
        stop()
    assert [generation for generation, _ in seen][-2:] == [1, 2]
    assert all(seconds >= 0 for _, seconds in seen)
    count = len(seen)
    gc.collect()
    assert len(seen) == count  # stopped


def test_a_listener_that_raises_does_not_break_the_collector():
    def broken(generation: int, seconds: float) -> None:
        raise RuntimeError("listener bug")
    stop = watch_collections(broken)
    try:
        gc.collect()
    finally:
        stop()
