"""The client places by the zones its bookies declare (docs/protocol.md P1-P4), over fake bookies.

The zones come with the bookie list the client reads (``transport.locations()``); ensembles, ensemble
changes and re-replication keep every write quorum spread; a shortfall is logged (P3) or, with
``min_ack_quorum_zones``, refused; without zones the choices are the ones of the uniform random policy.
"""
from __future__ import annotations

import logging
from collections import Counter

import pytest

from pyspark_ledger.errors import NotEnoughBookiesError
from pyspark_ledger.metadata.bookie_location import Location
from pyspark_ledger.protocol.placement import RandomPlacement
from tests.client.conftest import PASSWORD, wait_until

ZONES = {"bookie-0": "a", "bookie-1": "a", "bookie-2": "a", "bookie-3": "b", "bookie-4": "b", "bookie-5": "b"}


def zones_of(bookies) -> Counter:
    return Counter(ZONES[b] for b in bookies)


@pytest.fixture
def zoned(cluster):
    cluster.locations.update({b: Location(zone, f"rack-{b[-1]}") for b, zone in ZONES.items()})
    return cluster


@pytest.mark.bookies(6)
def test_P1_new_ensembles_and_ensemble_changes_spread_over_zones(zoned, make_client):
    client = make_client(seed=3)
    for _ in range(5):
        writer = client.create_ledger(4, 4, 3, password=PASSWORD)
        assert zones_of(writer.metadata.current_fragment.bookies) == {"a": 2, "b": 2}
        writer.close()
    writer = client.create_ledger(4, 4, 3, password=PASSWORD)
    writer.append(b"before")
    zoned.set_down(writer.metadata.current_fragment.bookies[0], deregister=True)
    writer.append(b"after")
    wait_until(lambda: len(writer.metadata.fragments) == 2, what="the ensemble change")
    assert zones_of(writer.metadata.current_fragment.bookies) == {"a": 2, "b": 2}
    writer.close()


@pytest.mark.bookies(6)
def test_P1_rereplication_keeps_the_fragment_spread(zoned, make_client):
    client = make_client(seed=5)
    writer = client.create_ledger(4, 4, 3, password=PASSWORD)
    for i in range(10):
        writer.append(b"entry %d" % i)
    writer.close()
    lost = writer.metadata.current_fragment.bookies[1]
    zoned.set_down(lost, deregister=True)
    report = client.rereplicate(writer.ledger_id, PASSWORD)
    assert [move["lost"] for move in report.replaced] == [lost]
    assert ZONES[report.replaced[0]["replacement"]] == ZONES[lost]
    assert zones_of(client.ledger_metadata(writer.ledger_id).fragments[0].bookies) == {"a": 2, "b": 2}


@pytest.mark.bookies(5)
def test_P3_a_spread_short_of_the_zones_is_logged_and_refused_when_enforced(cluster, make_client, caplog):
    cluster.locations.update({f"bookie-{i}": Location("a") for i in range(4)})
    cluster.locations["bookie-4"] = Location("b")
    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.client.context"):
        make_client().create_ledger(4, 2, 2, password=PASSWORD).close()  # 1 bookie of b: a write set is a+a
    assert "spans only 1 of the 2 zone(s) wanted" in caplog.text and "P3" in caplog.text
    enforcing = make_client(min_ack_quorum_zones=2)
    with pytest.raises(NotEnoughBookiesError, match=r"a: 4, b: 1"):
        enforcing.create_ledger(3, 3, 2, password=PASSWORD)
    enforcing.create_ledger(2, 2, 2, password=PASSWORD).close()  # one of each zone: every ack quorum spans both


@pytest.mark.bookies(7)
def test_P4_without_zones_the_client_chooses_as_the_random_policy_did(store, cluster, make_client):
    for seed in range(4):
        zoned, uniform = make_client(seed=seed), make_client(seed=seed, placement=RandomPlacement())
        for _ in range(3):
            ours, theirs = (client.create_ledger(3, 2, 2, password=PASSWORD) for client in (zoned, uniform))
            assert ours.metadata.current_fragment.bookies == theirs.metadata.current_fragment.bookies
            ours.close()
            theirs.close()
