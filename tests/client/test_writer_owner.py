"""One owner thread per writer: events run on the network thread one at a time, never stranded; callers
encode in id order and the owner's tracker agrees, also with several callers at once."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.add_bookkeeping import WriterOwner
from pyspark_ledger.client.io_loop import IoLoop
from tests.client.conftest import PASSWORD
from tests.client.invariants import Confirmed, check_invariants


@pytest.fixture
def io_loop():
    loop = IoLoop(name="test-writer-owner")
    try:
        yield loop
    finally:
        loop.close()


def test_events_from_any_thread_run_on_the_owner_in_order_and_one_at_a_time(io_loop):
    ran: list[tuple[int, int]] = []
    threads_seen: set[str] = set()
    running = []
    afters = []

    def event(poster: int, number: int) -> None:
        running.append(1)
        assert len(running) == 1, "two events of one writer ran at once"
        threads_seen.add(threading.current_thread().name)
        ran.append((poster, number))
        running.pop()
    owner = WriterOwner(io_loop, lambda: afters.append(1))
    posters = [threading.Thread(target=lambda p=p: [owner.post(event, p, n) for n in range(200)]) for p in range(4)]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join(10)
    done = threading.Event()
    owner.post(done.set)  # after every event posted before (their hand-offs to the loop came first)
    assert done.wait(10) and len(ran) == 800
    assert threads_seen == {"test-writer-owner"}
    for poster in range(4):  # each poster's events in the order it posted them
        assert [n for p, n in ran if p == poster] == list(range(200))
    assert afters


def test_call_runs_on_the_caller_while_the_owner_is_idle_and_events_posted_meanwhile_are_not_stranded(io_loop):
    owner = WriterOwner(io_loop, lambda: None)
    inside, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def long_step() -> str:
        inside.set()
        assert release.wait(10)
        return threading.current_thread().name
    caller = threading.Thread(target=lambda: ran.append(owner.call(long_step)))
    caller.start()
    assert inside.wait(10)
    # the owner thread posts while the caller holds the writer: the event waits for the holder, which runs it
    io_loop.call_soon(lambda: owner.post(lambda: ran.append("posted on the owner")))
    done = threading.Event()
    io_loop.call_soon(done.set)
    assert done.wait(10)
    assert ran == []
    release.set()
    caller.join(10)
    assert ran == ["posted on the owner", caller.name]


def test_call_inside_an_event_runs_at_once(io_loop):
    owner = WriterOwner(io_loop, lambda: None)
    assert owner.call(lambda: owner.call(lambda: "nested")) == "nested"


def test_entries_from_several_callers_get_the_ids_they_were_encoded_with(client, make_client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    futures: dict[int, list] = {caller: [] for caller in range(4)}

    def append(caller: int) -> None:
        for index in range(150):
            futures[caller].append(confirmed.append(writer, b"caller-%d-%d" % (caller, index)))
    callers = [threading.Thread(target=append, args=(caller,)) for caller in range(4)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(30)
    ids = [future.result(10) for caller in futures.values() for future in caller]
    assert sorted(ids) == list(range(600)) and writer.last_add_confirmed == 599
    for caller in futures.values():  # one caller's entries keep its order
        assert [future.result() for future in caller] == sorted(future.result() for future in caller)
    writer.close()
    check_invariants(client, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)
