"""Losing a whole zone loses no acknowledged entry (docs/protocol.md P2), with real bookie processes.

Six bookies on 127.0.0.1 declare two zones, three each (``--zone a`` / ``--zone b``). A ledger with
E = Qw = 4, Qa = 3 is placed 2 + 2 over the zones, so every ack quorum of 3 spans both (P2: no zone
holds Qa = 3 of a write quorum). The schedule is the adversary the rule is about: the zone to be
lost is the one holding the most bookies of the (last) ensemble, and Qw - Qa bookies outside it are
paused (SIGSTOP) while entries are written, so every acknowledgement comes from as few bookies outside
that zone as the ack quorum allows. Then every bookie of the zone is killed with SIGKILL and every
acknowledged entry must read back with its bytes -- from the one copy outside the zone, the paused
bookie still paused. The second test does the same after an ensemble change (a bookie of the ensemble
killed mid-ledger: its replacement must keep the spread, P1). Placing the whole ensemble, or a
replacement, in the crowded zone makes both fail.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.errors import NotEnoughBookiesError
from pyspark_ledger.testing.bookies import BookieCluster
from tests.conftest import backend_uri
from tests.integration.conftest import PASSWORD, payload, wait_until

ZONES = ["a", "a", "a", "b", "b", "b"]
CONFIG = ClientConfig(add_timeout_s=60.0, read_timeout_s=3.0, recovery_timeout_s=60.0, close_timeout_s=30.0,
                      long_poll_timeout_s=1.0, placement_seed=17)


@pytest.fixture
def zoned(request, tmp_path):
    """(cluster, metadata uri): six started bookies in two zones, all killed at teardown (paused ones too)."""
    uri = backend_uri(request, tmp_path, "sqlite")
    cluster = BookieCluster(len(ZONES), tmp_path / "bookies", uri, zones=ZONES)
    cluster.start()
    try:
        yield cluster, uri
    finally:
        for bookie in cluster.bookies:
            bookie.kill()


@pytest.fixture
def client_for(zoned):
    cluster, uri = zoned
    clients: list[LedgerClient] = []

    def make(**overrides) -> LedgerClient:
        clients.append(LedgerClient(uri, dataclasses.replace(CONFIG, **overrides)))
        wait_until(lambda: len(clients[-1].bookies()) == len(ZONES), what="every bookie to register")
        return clients[-1]

    try:
        yield make
    finally:
        for client in clients:
            client.close()


def zone_of(cluster: BookieCluster) -> dict[str, str]:
    return {bookie.bookie_id: bookie.flags["zone"] for bookie in cluster.bookies}


def write_with_the_adversary(cluster, writer, first: int, count: int) -> tuple[str, list]:
    """Pick the zone to lose (most bookies of the current ensemble), pause Qw - Qa bookies of the ensemble
    outside it, write ``count`` entries and wait until each is acknowledged; returns (zone, paused)."""
    zones = zone_of(cluster)
    ensemble = writer.metadata.current_fragment.bookies
    doomed = sorted(Counter(zones[b] for b in ensemble).items(), key=lambda item: (-item[1], item[0]))[0][0]
    outside = [b for b in ensemble if zones[b] != doomed]
    by_id = {bookie.bookie_id: bookie for bookie in cluster.bookies}
    paused = [by_id[b] for b in outside[:writer.metadata.write_quorum - writer.metadata.ack_quorum]]
    for bookie in paused:
        bookie.pause()
    futures = [writer.append_async(payload(first + i)) for i in range(count)]
    assert [future.result(60) for future in futures] == list(range(first, first + count))
    return doomed, paused


def lose_zone_and_read_back(cluster, client, ledger_id: int, doomed: str, total: int) -> None:
    for bookie in cluster.in_zone(doomed):
        bookie.kill()
    reader = client.open_ledger(ledger_id, PASSWORD)
    assert [entry.data for entry in reader.read()] == [payload(i) for i in range(total)]


def test_P2_losing_a_whole_zone_loses_no_acknowledged_entry(zoned, client_for):
    """First, with min_ack_quorum_zones=2 (P3): E = Qw = 3, Qa = 2 over two zones puts 2 bookies of one zone in
    the write quorum -- an ack quorum could lie in one zone -- so it is refused naming the zones."""
    cluster, _ = zoned
    with pytest.raises(NotEnoughBookiesError, match=r"a: 3, b: 3"):
        client_for(min_ack_quorum_zones=2).create_ledger(3, 3, 2, password=PASSWORD)
    client_for(min_ack_quorum_zones=2).create_ledger(4, 4, 3, password=PASSWORD).close()  # 2 + 2: allowed
    writer = client_for().create_ledger(4, 4, 3, password=PASSWORD)
    zones = zone_of(cluster)
    assert Counter(zones[b] for b in writer.metadata.current_fragment.bookies) == {"a": 2, "b": 2}
    doomed, paused = write_with_the_adversary(cluster, writer, 0, 40)
    writer.close()
    lose_zone_and_read_back(cluster, client_for(), writer.ledger_id, doomed, 40)
    assert all(bookie.is_running() for bookie in paused)  # still paused: the copies came from elsewhere


def test_P1_P2_after_an_ensemble_change_losing_a_zone_loses_nothing(zoned, client_for):
    cluster, _ = zoned
    writer = client_for().create_ledger(4, 4, 3, password=PASSWORD)
    for future in [writer.append_async(payload(i)) for i in range(20)]:
        future.result(60)
    by_id = {bookie.bookie_id: bookie for bookie in cluster.bookies}
    victim = by_id[writer.metadata.current_fragment.bookies[0]]
    victim.kill()
    for future in [writer.append_async(payload(20 + i)) for i in range(20)]:
        future.result(60)
    # entries with Qa acks from the others are confirmed while the change is under way (W7): wait for it
    wait_until(lambda: victim.bookie_id not in writer.metadata.current_fragment.bookies,
               what="the ensemble change that replaces the killed bookie")
    zones = zone_of(cluster)
    assert Counter(zones[b] for b in writer.metadata.current_fragment.bookies) == {"a": 2, "b": 2}
    doomed, _ = write_with_the_adversary(cluster, writer, 40, 30)
    writer.close()
    lose_zone_and_read_back(cluster, client_for(), writer.ledger_id, doomed, 70)
