"""OrderedCompletions keeps runs of futures as pushed: against the one-future-per-item form on random sequences."""
from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_ledger.client.add_bookkeeping import OrderedCompletions
from pyspark_ledger.client.add_futures import complete, fail, new_future


class Stop(BaseException):
    """Raised by a done-callback: not caught by Future's callback loop, so it leaves ``complete``."""


class PerFuture:
    """The model: one queue item per future, completed one by one (the form before runs)."""

    def __init__(self) -> None:
        self.queue: deque = deque()

    def push(self, future, value=None, error=None) -> None:
        self.queue.append((future, value, error))

    def push_results(self, futures, values) -> None:
        self.queue.extend(zip(futures, values, [None] * len(futures)))

    def run(self) -> int:
        done = 0
        while self.queue:
            future, value, error = self.queue.popleft()
            done += 1
            if error is not None:
                fail(future, error)
            else:
                complete(future, value)
        return done


# an op: ("one", value, is_error, cancelled) | ("many", [(value, cancelled, stops)]) | ("run",)
_one = st.tuples(st.just("one"), st.integers(0, 99), st.booleans(), st.booleans())
_many = st.tuples(st.just("many"), st.lists(st.tuples(st.integers(0, 99), st.booleans(), st.booleans()),
                                            max_size=6))
_ops = st.lists(st.one_of(_one, _many, st.just(("run",))), max_size=25)


def replay(queue, ops) -> tuple[list, list]:
    """Apply ``ops``; what completed, in order, and each future's end state."""
    seen: list = []
    futures: list = []

    def made(tag, cancelled: bool, stops: bool = False):
        future = new_future()
        if cancelled:
            future.cancel()

        def record(f, tag=tag):
            seen.append((tag, "cancelled" if f.cancelled() else repr(f.exception()) if f.exception() else f.result()))
            if stops:
                raise Stop()
        future.add_done_callback(record)
        futures.append(future)
        return future
    stopped = 0
    for index, op in enumerate(ops):
        try:
            if op[0] == "one":
                _, value, is_error, cancelled = op
                future = made((index, 0), cancelled)
                queue.push(future, None if is_error else value, ValueError(str(value)) if is_error else None)
            elif op[0] == "many":
                items = op[1]
                queue.push_results([made((index, k), cancelled, stops) for k, (_, cancelled, stops) in enumerate(items)],
                                   [value for value, _, _ in items])
            else:
                queue.run()
        except Stop:
            stopped += 1
    while True:
        try:
            queue.run()
            break
        except Stop:
            stopped += 1
    states = [(f.cancelled(), f.done() and not f.cancelled() and (repr(f.exception()) if f.exception() else f.result()))
              for f in futures]
    return seen, states + [stopped]


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_runs_complete_as_the_per_future_queue_does(ops):
    assert replay(OrderedCompletions(), ops) == replay(PerFuture(), ops)


def test_a_completion_that_raises_leaves_the_rest_of_its_run_queued_first():
    queue = OrderedCompletions()
    order: list[int] = []
    futures = [new_future() for _ in range(4)]
    for index, future in enumerate(futures):
        future.add_done_callback(lambda f, index=index: order.append(index))
    futures[1].add_done_callback(lambda f: (_ for _ in ()).throw(Stop()))
    later = new_future()
    later.add_done_callback(lambda f: order.append(9))
    queue.push_results(futures, [0, 1, 2, 3])
    queue.push(later, 9)
    with pytest.raises(Stop):
        queue.run()
    assert order == [0, 1] and queue
    assert queue.run() == 3 and order == [0, 1, 2, 3, 9] and not queue
    assert [f.result(0) for f in futures] == [0, 1, 2, 3]
