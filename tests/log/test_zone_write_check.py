"""A writer's check of ``min_ack_quorum_zones`` before it creates anything (``log.writable_bookies``).

With m >= 2 zones demanded of every ack quorum (docs/protocol.md P2, P3) the write is refused at once
when the ack quorum is too small to span m zones (InvalidConfigurationError naming the setting and the
limit) or when the zones of the writable bookies registered now cannot give it (NotEnoughBookiesError
naming the zones). A real SQLite metadata store holds the registrations, with the zone info a bookie
started with ``--zone`` publishes.
"""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidConfigurationError, NotEnoughBookiesError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.writable_bookies import ReplicationNames, check_bookies_for_write
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.bookie_location import Location, location_info

SPARK_NAMES = ReplicationNames("ensembleSize", "writeQuorum", "ackQuorum", "option minAckQuorumZones")


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite://{tmp_path}/metadata.db"
    store = open_metadata_store(uri, create=True)
    registrations = [store.register_bookie(f"10.0.0.{index}:3181", info=location_info(Location(zone)))
                     for index, zone in enumerate(["zone-a", "zone-a", "zone-b", "zone-b"], 1)]
    try:
        yield store
    finally:
        for registration in registrations:
            registration.close()
        store.close()


def check(store, replication: Replication, zones: int, *, exists: bool = False, names=SPARK_NAMES) -> None:
    check_bookies_for_write(store, store.uri, "orders", replication, stream_exists=exists, names=names,
                            min_ack_zones=zones)


def test_a_placement_the_zones_allow_passes(store):
    check(store, Replication(2, 2, 2), 2)   # one bookie per zone in every write set
    check(store, Replication(4, 4, 3), 2)   # two per zone, Qa - 1 = 2
    check(store, Replication(3, 3, 2), 1)   # no demand: placed with a warning at most


def test_an_ack_quorum_smaller_than_the_zones_demanded_is_refused_naming_the_limit(store):
    with pytest.raises(InvalidConfigurationError) as caught:
        check(store, Replication(3, 3, 2), 3)
    assert str(caught.value) == (
        "option minAckQuorumZones=3 cannot be met: option ackQuorum=2, and an ack quorum of 2 bookie(s) spans at "
        "most 2 zone(s) (docs/protocol.md P2); use option minAckQuorumZones <= 2 or a larger ackQuorum. "
        "Nothing was written")
    with pytest.raises(InvalidConfigurationError, match=r"stream 'orders' has ack_quorum=1 \(fixed when"):
        check(store, Replication(3, 3, 1), 2, exists=True, names=ReplicationNames())


def test_zones_that_cannot_give_the_spread_are_refused_naming_them(store):
    with pytest.raises(NotEnoughBookiesError) as caught:
        check(store, Replication(3, 3, 2), 2)   # 3 bookies over 2 zones: one zone holds an ack quorum
    message = str(caught.value)
    assert message.startswith(f"option minAckQuorumZones=2: the 4 writable bookie(s) of {store.uri} cannot hold a "
                              "ledger of stream 'orders': no placement for a new ensemble"), message
    assert "eligible bookies per zone: zone-a: 2, zone-b: 2" in message and message.endswith("Nothing was written")


def test_a_log_writer_checks_its_clients_demand_before_creating_a_ledger(store):
    from pyspark_ledger.client.config import ClientConfig
    from pyspark_ledger.log.stream_client import StreamClient

    streams = StreamClient(store, password=b"pw", config=ClientConfig(min_ack_quorum_zones=2, tls=None))
    try:
        streams.create_stream("orders", 1, ensemble_size=3, write_quorum=3, ack_quorum=2)
        with pytest.raises(NotEnoughBookiesError, match=r"^min_ack_quorum_zones=2: the 4 writable bookie\(s\)"):
            streams.open_writer("orders", 0)
        assert list(store.list_ledgers()) == []
    finally:
        streams.close()
