"""A bookie that sheds load (TOO_MANY_REQUESTS) on adds is asked again after a back-off, not replaced.

Before this, a shed add counted as the bookie's failure: a hundred writers creating ledgers at once made
every bookie's guard of first adds shed some of them, every writer quarantined every bookie, and all of
them failed with "no bookie left to replace" (tests/bookie/test_many_writers.py on a loaded machine).
The decision is ``protocol.add_answers``; these tests drive the writer over fake bookies.
"""
from __future__ import annotations

import pytest

from pyspark_ledger.protocol.add_answers import (RETRY_MAX_S, RETRY_MIN_S, AddAction, action_for_status,
                                                 busy_retry_delay)
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.client.conftest import PASSWORD, wait_until

TIMEOUT_S = 1.0


def test_every_wire_status_has_one_action():
    expected = {"OK": AddAction.ACK, "FENCED": AddAction.FENCED, "UNAUTHORIZED": AddAction.UNAUTHORIZED,
                "TOO_MANY_REQUESTS": AddAction.RETRY, "READ_ONLY": AddAction.REPLACE_NOW}
    for name in pb.Status.keys():
        assert action_for_status(name) is expected.get(name, AddAction.BOOKIE_FAILED), name
    assert action_for_status("A_STATUS_ADDED_LATER") is AddAction.BOOKIE_FAILED


def test_the_back_off_grows_stays_bounded_and_ends_at_the_timeout():
    waits = [busy_retry_delay(elapsed / 100, 10.0) for elapsed in range(0, 950)]  # up to 9.5 s of 10
    assert waits[0] == RETRY_MIN_S and all(RETRY_MIN_S <= w <= RETRY_MAX_S for w in waits)
    assert waits == sorted(waits), "the wait never shrinks while the add is shed"
    assert waits[-1] == RETRY_MAX_S
    assert busy_retry_delay(9.9, 10.0) == pytest.approx(0.1), "a re-send is never scheduled past the timeout"
    assert busy_retry_delay(10.0, 10.0) is None and busy_retry_delay(11.0, 10.0) is None


@pytest.mark.bookies(4)
def test_a_bookie_that_sheds_some_adds_keeps_its_place_and_gets_every_entry(make_client, cluster, store):
    client = make_client(add_timeout_s=TIMEOUT_S)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)  # Qa = 3: every add waits for the shedding one
    busy = writer.metadata.current_fragment.bookies[1]
    version = store.read_ledger(writer.ledger_id).version
    rule = cluster.fail(busy, op="add", status="TOO_MANY_REQUESTS", count=5)
    assert [writer.append(b"entry-%d" % index) for index in range(10)] == list(range(10))
    assert rule.matched == 5, "the bookie did not shed the first adds"
    assert store.read_ledger(writer.ledger_id).version == version, "shed load caused an ensemble change"
    assert writer.metadata.current_fragment.bookies[1] == busy
    assert busy not in client._ctx.quarantine.current(), "a bookie that shed load was quarantined"
    assert all(busy in cluster.holders(writer.ledger_id, e) for e in range(10))
    writer.close()


@pytest.mark.bookies(4)
def test_a_bookie_that_sheds_past_the_add_timeout_is_replaced(make_client, cluster, store):
    client = make_client(add_timeout_s=TIMEOUT_S)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    busy = writer.metadata.current_fragment.bookies[2]
    rule = cluster.fail(busy, op="add", status="TOO_MANY_REQUESTS")
    assert writer.append(b"entry-0") == 0  # confirmed once the replacement has it
    wait_until(lambda: busy not in writer.metadata.current_fragment.bookies, what=f"{busy} to be replaced")
    assert rule.matched >= 3, "the shed add was not sent again before giving up on the bookie"
    assert "TOO_MANY_REQUESTS" in client._ctx.quarantine.reasons()[busy]
    writer.close()
