"""Ensemble-change storms (issue 12, part 9) over the fake bookies: quarantine, back-off, a bounded fragment count.

Before the fix, a writer with one failed bookie in its ensemble and only another
failed bookie to replace it with swapped the position between the two as fast as
the metadata store allowed: 76 fragments in 3 s over these fakes (247-319 against
real bookies).
"""
from __future__ import annotations

import threading
import time

import pytest

from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.protocol.quarantine import ChangeBackoff, max_changes
from tests.client.conftest import PASSWORD

BACKOFF = ChangeBackoff()


def append_for(writer, seconds: float) -> int:
    """Append small entries for ``seconds`` (at most 200 unconfirmed); every one must be confirmed."""
    end = time.monotonic() + seconds
    futures, count = [], 0
    while time.monotonic() < end:
        futures.append(writer.append_async(b"entry %d" % count))
        count += 1
        if len(futures) > 200:
            futures.pop(0).result(30)
    assert [future.result(30) for future in futures] == list(range(count - len(futures), count))
    return count


def check_bounded(store, writer, started: float) -> None:
    """Fragments and metadata writes within the stated bound of ``protocol.quarantine``."""
    elapsed = time.monotonic() - started
    changes = writer.ensemble_changes
    # a change at the first entry of the last fragment replaces that fragment instead of adding one
    assert len(writer.metadata.fragments) - 1 <= changes
    assert changes <= max_changes(elapsed, BACKOFF), (changes, elapsed)
    # one write per change, plus the create and the close (no CAS conflicts: one writer)
    assert len(store.history[writer.ledger_id]) <= changes + 2


@pytest.mark.bookies(5)
def test_two_unreachable_bookies_swap_a_position_a_bounded_number_of_times(client, cluster, store):
    writer = client.create_ledger(4, 3, 2, password=PASSWORD)
    ensemble = writer.metadata.current_fragment.bookies
    spare = (set(cluster.bookies) - set(ensemble)).pop()
    cluster.set_down(ensemble[0])
    cluster.set_down(spare)  # the only replacement is down too: nothing but failed bookies to swap in
    started = time.monotonic()
    appended = append_for(writer, 2.0)
    check_bounded(store, writer, started)
    assert writer.ensemble_changes >= 2  # it did swap: each bookie failed, was replaced, and taken back
    assert set(client._ctx.quarantine.current()) == {ensemble[0], spare}
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id) == (CLOSED, appended - 1)


@pytest.mark.bookies(6)
def test_scripted_flapping_keeps_the_fragment_count_bounded(client, cluster, store):
    """Two bookies go down and up every 50 ms, out of step, while a writer appends."""
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    ensemble = writer.metadata.current_fragment.bookies
    outside = sorted(set(cluster.bookies) - set(ensemble))
    flappers = [ensemble[0], outside[0]]
    stop = threading.Event()

    def flap() -> None:
        turn = 0
        while not stop.wait(0.05):
            cluster.set_down(flappers[turn % 2], True)
            cluster.set_down(flappers[(turn + 1) % 2], False)
            turn += 1

    flapper = threading.Thread(target=flap, name="flapper")
    flapper.start()
    try:
        started = time.monotonic()
        append_for(writer, 2.0)
    finally:
        stop.set()
        flapper.join()
    check_bounded(store, writer, started)
    last = writer.metadata.current_fragment.bookies
    assert not set(last) & set(flappers) or len(writer.metadata.fragments) == 1  # quarantine kept them out
    writer.close()


@pytest.mark.bookies(4)
def test_a_writer_progresses_when_every_other_bookie_is_quarantined(client, cluster):
    """Quarantine is a preference: with nothing else left, the bookie released first is taken back."""
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    ensemble = writer.metadata.current_fragment.bookies
    spare = (set(cluster.bookies) - set(ensemble)).pop()
    quarantine = client._ctx.quarantine
    quarantine.failed(spare, "scripted failure")
    assert writer.append(b"before") == 0
    cluster.set_down(ensemble[1])
    assert writer.append(b"after") == 1  # confirmed once the quarantined spare took the failed position
    assert writer.metadata.current_fragment.bookies == (ensemble[0], spare, ensemble[2])
    # a new ledger too, with every bookie quarantined now
    for bookie in cluster.bookies:
        quarantine.failed(bookie, "scripted failure")
    cluster.set_down(ensemble[1], False)
    other = client.create_ledger(3, 3, 2, password=PASSWORD)
    assert other.append(b"x") == 0
    other.close()
    writer.close()


@pytest.mark.bookies(5)
def test_placement_avoids_quarantined_bookies_while_others_are_left(client, cluster):
    quarantine = client._ctx.quarantine
    avoided = sorted(cluster.bookies)[:2]
    for bookie in avoided:
        quarantine.failed(bookie, "scripted failure")
    for _ in range(10):
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        assert not set(writer.metadata.current_fragment.bookies) & set(avoided)
        writer.close()


@pytest.mark.bookies(3)
def test_not_enough_bookies_names_the_failed_bookie_and_why(client, cluster):
    from pyspark_ledger.errors import NotEnoughBookiesError
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    victim = writer.metadata.current_fragment.bookies[1]
    cluster.set_down(victim)
    failed = writer.append_async(b"x")
    with pytest.raises(NotEnoughBookiesError) as info:
        failed.result(10)
    message = str(info.value)
    failed_part = message.partition("Bookies that failed this client: ")[2]
    assert victim in failed_part and "quarantined" in failed_part
    writer.close()
