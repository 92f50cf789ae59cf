"""IoLoop: the client's network thread -- kicks coalesce, blocking calls refused on it, close joins it."""
from __future__ import annotations

import asyncio
import threading

import pytest

from pyspark_ledger.client.io_loop import IoLoop
from pyspark_ledger.errors import BookieUnavailableError, InvalidStateError


@pytest.fixture
def io_loop():
    loop = IoLoop(name="test-io-loop")
    try:
        yield loop
    finally:
        loop.close()


def test_kicks_before_the_loop_runs_them_coalesce(io_loop):
    ran: list[str] = []
    gate, done = threading.Event(), threading.Event()
    io_loop.call_soon(lambda: gate.wait(10))  # the loop is busy until the gate opens
    for _ in range(5):
        io_loop.kick(1, lambda: ran.append("a"))
        io_loop.kick(2, lambda: ran.append("b"))
    io_loop.call_soon(done.set)
    gate.set()
    assert done.wait(10)
    assert sorted(ran) == ["a", "b"]


def test_results_and_errors_of_coroutines_cross_threads(io_loop):
    async def answer(value):
        await asyncio.sleep(0)
        if isinstance(value, Exception):
            raise value
        return value

    assert io_loop.run(answer(42), timeout=10) == 42
    assert io_loop.submit(answer(7)).result(10) == 7
    with pytest.raises(KeyError):
        io_loop.submit(answer(KeyError("x"))).result(10)


def test_a_blocking_call_on_the_loop_thread_is_refused(io_loop):
    async def nested():
        return io_loop.run(asyncio.sleep(0))

    with pytest.raises(InvalidStateError, match="_async form"):
        io_loop.run(nested(), timeout=10)


def test_close_cancels_tasks_joins_the_thread_and_later_calls_fail():
    loop = IoLoop(name="test-io-loop-closing")
    cancelled = threading.Event()

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop.spawn(forever())
    loop.close()
    assert cancelled.is_set()
    assert not [t for t in threading.enumerate() if t.name == "test-io-loop-closing"]
    with pytest.raises(BookieUnavailableError):
        loop.submit(asyncio.sleep(0)).result(1)
    with pytest.raises(BookieUnavailableError):
        loop.call_soon(lambda: None)
    loop.close()  # idempotent
