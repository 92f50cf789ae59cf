"""add_futures.new_future: an ordinary concurrent.futures.Future, whatever its condition is made of."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time

import pytest

from pyspark_ledger.client.add_futures import _lean_future, complete, complete_all, fail, new_future


def test_this_python_gets_the_lean_future():
    assert new_future is _lean_future
    assert type(new_future()) is cf.Future


def test_a_result_set_on_another_thread_wakes_the_waiter():
    future = new_future()
    threading.Timer(0.05, future.set_result, (5,)).start()
    assert future.result(10) == 5
    failing = new_future()
    threading.Timer(0.05, failing.set_exception, (ValueError("no"),)).start()
    assert isinstance(failing.exception(10), ValueError)
    with pytest.raises(ValueError):
        failing.result(0)


def test_timeouts_cancel_callbacks_wait_and_asyncio_behave_as_for_future():
    with pytest.raises(cf.TimeoutError):
        new_future().result(0.01)
    cancelled = new_future()
    assert cancelled.cancel() and cancelled.cancelled()
    seen = []
    done = new_future()
    done.add_done_callback(lambda f: seen.append(f.result()))
    waiting = new_future()
    threading.Timer(0.05, done.set_result, (1,)).start()
    finished, pending = cf.wait([done, waiting], timeout=10, return_when=cf.FIRST_COMPLETED)
    assert finished == {done} and pending == {waiting} and seen == [1]
    assert [f.result() for f in cf.as_completed([done], timeout=10)] == [1]

    async def awaited() -> int:
        future = new_future()
        asyncio.get_running_loop().call_later(0.01, future.set_result, 9)
        return await asyncio.wrap_future(future)
    assert asyncio.run(awaited()) == 9


@pytest.mark.parametrize("make", [new_future, cf.Future], ids=["lean", "plain"])
def test_complete_and_fail_wake_waiters_tell_wait_and_run_callbacks(make):
    seen = []
    done, failing, waiting = make(), make(), make()
    done.add_done_callback(lambda f: seen.append(f.result()))
    failing.add_done_callback(lambda f: seen.append(type(f.exception()).__name__))
    threading.Timer(0.05, complete, (done, 7)).start()
    started = time.monotonic()
    assert done.result(30) == 7
    assert time.monotonic() - started < 15  # woken, not timed out
    threading.Timer(0.05, fail, (failing, ValueError("no"))).start()
    finished, pending = cf.wait([failing, waiting], timeout=10, return_when=cf.FIRST_COMPLETED)
    assert finished == {failing} and pending == {waiting} and seen == [7, "ValueError"]
    with pytest.raises(ValueError):
        failing.result(0)
    assert [f.result() for f in cf.as_completed([done], timeout=10)] == [7]


@pytest.mark.parametrize("make", [new_future, cf.Future], ids=["lean", "plain"])
def test_a_cancelled_future_stays_cancelled_and_a_finished_one_keeps_its_value(make):
    cancelled = make()
    assert cancelled.cancel()
    complete(cancelled, 1)
    fail(cancelled, ValueError("late"))
    assert cancelled.cancelled()
    finished = make()
    complete(finished, 2)
    complete(finished, 3)
    fail(finished, ValueError("late"))
    assert finished.result(0) == 2


def test_the_lean_condition_is_a_reentrant_lock_with_the_conditions_wait_and_notify():
    future = new_future()
    condition = future._condition
    with condition:
        with condition:  # re-entrant, as Future's RLock is
            assert condition._is_owned()
        assert not condition.wait(0.01)  # a timeout: False, and the lock is held again
        assert condition._is_owned()
    assert not condition._is_owned()
    with pytest.raises(RuntimeError):
        condition.wait(0)
    with pytest.raises(RuntimeError):
        condition.notify_all()


def test_every_thread_waiting_in_result_is_woken_by_complete_and_a_timeout_leaves_no_waiter():
    future = new_future()
    with pytest.raises(cf.TimeoutError):
        future.result(0.01)
    assert len(future._condition._waiters) == 0  # the timed-out waiter left the queue
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(future.result(60)), daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(future._condition._waiters) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    complete(future, 3)
    woken_by = time.monotonic() + 10  # woken, not timed out (60 s)
    for thread in threads:
        thread.join(max(0.0, woken_by - time.monotonic()))
    assert seen == [3, 3, 3, 3] and not future._condition._waiters


@pytest.mark.parametrize("make", [new_future, cf.Future], ids=["lean", "plain"])
def test_complete_all_finishes_each_future_in_order_as_complete_does(make, caplog):
    """One loop for a batch: values in order, a cancelled future left alone, waiters in ``wait`` and ``result``
    told, and a callback's Exception logged while the next callbacks and futures still run."""
    seen: list = []
    futures = [make() for _ in range(4)]
    assert futures[2].cancel()
    futures[0].add_done_callback(lambda f: seen.append(("a", f.result())))
    futures[0].add_done_callback(lambda f: 1 / 0)
    futures[0].add_done_callback(lambda f: seen.append(("b", f.result())))
    futures[3].add_done_callback(lambda f: seen.append(("c", f.result())))
    waited: list = []
    waiter = threading.Thread(target=lambda: waited.append(futures[1].result(60)), daemon=True)
    waiter.start()
    in_wait = threading.Thread(target=lambda: waited.append(len(cf.wait([futures[3]], timeout=60).done)),
                               daemon=True)
    in_wait.start()
    time.sleep(0.05)
    with caplog.at_level("ERROR", logger="concurrent.futures"):
        complete_all(zip(futures, [10, 11, 12, 13]))
    waiter.join(10)
    in_wait.join(10)
    assert seen == [("a", 10), ("b", 10), ("c", 13)]
    assert "exception calling callback" in caplog.text
    assert futures[2].cancelled() and [futures[i].result(0) for i in (0, 1, 3)] == [10, 11, 13]
    assert sorted(waited) == [1, 11]


def test_complete_all_stops_at_a_callback_that_raises_other_than_exception_leaving_the_rest_in_pairs():
    class Stop(BaseException):
        pass
    futures = [new_future() for _ in range(3)]
    futures[1].add_done_callback(lambda f: (_ for _ in ()).throw(Stop()))
    pairs = zip(futures, [0, 1, 2])
    with pytest.raises(Stop):
        complete_all(pairs)
    assert futures[1].result(0) == 1 and not futures[2].done()
    assert list(pairs) == [(futures[2], 2)]
