"""add_futures.new_future: an ordinary concurrent.futures.Future, whatever its condition is made of."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

from pyspark_ledger.client.add_futures import _lean_future, new_future


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
