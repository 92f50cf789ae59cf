"""Option ``minAckQuorumZones`` of the ``ledger`` sink (docs/protocol.md P2, P3), against real bookies in zones.

Three bookie processes: two in ``zone-a``, one in ``zone-b``. Ledgers of E = Qw = Qa = 2 can have every
ack quorum span both zones; ledgers of E = Qw = 3, Qa = 2 cannot.

- A write task's client places by the plan's demand: with 2 zones demanded it refuses the ledger that
  the default places with a warning (run in this process: no Spark needed).
- A Spark write with ``minAckQuorumZones=2`` and E = Qw = Qa = 2 writes ledgers spanning both zones.
- A demand the ack quorum cannot meet, or the zones of the bookies cannot give, fails on the driver at
  planning, naming the option, before any task runs or any ledger is made.
"""
from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.errors import NotEnoughBookiesError  # noqa: E402
from pyspark_ledger.log.log_metadata import Replication  # noqa: E402
from pyspark_ledger.log.stream_schema import stored_schema  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.spark.sink_plan import SinkPlan  # noqa: E402
from pyspark_ledger.spark.sink_task import _TaskLedger  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

ZONES = ["zone-a", "zone-a", "zone-b"]
PASSWORD = "zone-option"
SCHEMA = stored_schema(pa.schema([pa.field("id", pa.int64())]))


@pytest.fixture(scope="module")
def zoned(tmp_path_factory):
    base = tmp_path_factory.mktemp("zoned")
    uri = f"sqlite:///{base}/metadata.db"
    with BookieCluster(3, base / "bookies", uri, zones=ZONES) as cluster:
        try:
            yield cluster
        finally:
            executor.close_all(uri)


def zone_of(cluster) -> dict[str, str]:
    return {bookie.bookie_id: bookie.flags["zone"] for bookie in cluster.bookies}


def task_ledger(cluster, replication: Replication, zones: int) -> _TaskLedger:
    plan = SinkPlan(uri=cluster.metadata_uri, stream="zone-task", schema=SCHEMA, replication=replication,
                    partition_count=1, exists=False, password=PASSWORD.encode(), tls=None,
                    min_ack_quorum_zones=zones)
    return _TaskLedger(plan, 0)


def test_a_write_task_places_its_ledger_by_the_plans_demand(zoned):
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int64())], schema=SCHEMA)
    spread = task_ledger(zoned, Replication(2, 2, 2), 2)
    spread.append(batch)
    spread.finish()
    ensemble = executor.ledger_client(zoned.metadata_uri).ledger_metadata(spread.ledger_ids[0]).fragments[0].bookies
    assert sorted(zone_of(zoned)[bookie] for bookie in ensemble) == ["zone-a", "zone-b"]
    default = task_ledger(zoned, Replication(3, 3, 2), 1)
    default.append(batch)   # placed, with a warning: zone-a holds 2 of 3
    default.finish()
    with pytest.raises(NotEnoughBookiesError, match="span 2 zones"):
        task_ledger(zoned, Replication(3, 3, 2), 2).append(batch)


@pytest.mark.spark
def test_a_spark_write_spreads_its_ledgers_over_the_zones_demanded(spark, zoned, request):
    stream = unique_stream(request)
    (spark.range(0, 40).repartition(2).write.format("ledger").mode("append")
     .options(metadataServiceUri=zoned.metadata_uri, password=PASSWORD, ensembleSize="2", writeQuorum="2",
              ackQuorum="2", minAckQuorumZones="2").save(stream))
    logs = executor.stream_client(zoned.metadata_uri, PASSWORD).partition_logs(stream)
    ledgers = [span.ledger_id for log in logs.values() for span in log.spans]
    assert len(ledgers) == 2
    client = executor.ledger_client(zoned.metadata_uri)
    for ledger_id in ledgers:
        ensemble = client.ledger_metadata(ledger_id).fragments[0].bookies
        assert sorted(zone_of(zoned)[bookie] for bookie in ensemble) == ["zone-a", "zone-b"]


@pytest.mark.spark
@pytest.mark.parametrize("options,error,expected", [
    ({"ensembleSize": "3", "writeQuorum": "3", "ackQuorum": "2", "minAckQuorumZones": "2"}, "NotEnoughBookiesError",
     "option minAckQuorumZones=2: the 3 writable bookie(s) of"),
    ({"ensembleSize": "3", "writeQuorum": "3", "ackQuorum": "2", "minAckQuorumZones": "3"},
     "InvalidConfigurationError", "option minAckQuorumZones=3 cannot be met: option ackQuorum=2"),
])
def test_a_demand_that_cannot_be_met_fails_at_planning(spark, zoned, request, options, error, expected):
    from tests.spark.test_planning_checks import fails_on_the_driver

    client = executor.ledger_client(zoned.metadata_uri)
    before = set(client.list_ledgers())
    writer = (spark.range(0, 20).repartition(2).write.format("ledger").mode("append")
              .options(metadataServiceUri=zoned.metadata_uri, password=PASSWORD, **options))
    fails_on_the_driver(lambda: writer.save(unique_stream(request)), error, expected)
    assert set(client.list_ledgers()) == before, "a ledger was created"
