"""``--min-ack-quorum-zones`` of the commands that place bookies, against real bookies in two zones.

Three bookie processes: two started with ``--zone zone-a``, one with ``--zone zone-b``. A ledger of
E = Qw = Qa = 2 can have every ack quorum span both zones; one of E = Qw = 3, Qa = 2 cannot (zone-a holds
two of its three bookies, which may be the ack quorum: docs/protocol.md P2), so the flag refuses it where
the default places it with a warning. A demand the ack quorum cannot meet, or out of bounds, is refused
before anything is made, naming the flag and the limit.
"""
from __future__ import annotations

import json

import pytest

from pyspark_ledger import LedgerClient
from pyspark_ledger.testing.bookies import BookieCluster
from tests.cli.test_admin_cli import run_ledger

ZONES = ["zone-a", "zone-a", "zone-b"]


@pytest.fixture(scope="module")
def zoned(tmp_path_factory):
    base = tmp_path_factory.mktemp("zoned")
    uri = f"sqlite:///{base}/metadata.db"
    with BookieCluster(3, base / "bookies", uri, zones=ZONES) as cluster:
        yield cluster


def ledger(cluster, *args: str):
    return run_ledger("--metadata", cluster.metadata_uri, *args)


def zone_of(cluster) -> dict[str, str]:
    return {bookie.bookie_id: bookie.flags["zone"] for bookie in cluster.bookies}


def test_simpletest_places_every_ack_quorum_over_the_zones_demanded(zoned):
    result = ledger(zoned, "--json", "simpletest", "-e", "2", "-w", "2", "-a", "2", "-n", "20", "--keep",
                    "--min-ack-quorum-zones", "2")
    assert result.returncode == 0, result.stderr
    ledger_id = json.loads(result.stdout)["ledger_id"]
    with LedgerClient(zoned.metadata_uri) as client:
        ensemble = client.ledger_metadata(ledger_id).fragments[0].bookies
    assert sorted(zone_of(zoned)[bookie] for bookie in ensemble) == ["zone-a", "zone-b"]


def test_simpletest_refuses_a_placement_whose_ack_quorum_could_lie_in_one_zone(zoned):
    assert ledger(zoned, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "5").returncode == 0, \
        "without the flag the ledger is placed (with a warning)"
    refused = ledger(zoned, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "5", "--min-ack-quorum-zones", "2")
    assert refused.returncode == 1, refused.stderr
    assert "lets every ack quorum of 2 bookie(s) span 2 zones (min_ack_quorum_zones=2" in refused.stderr
    assert "eligible bookies per zone: zone-a: 2, zone-b: 1" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("args,words", [
    (("simpletest", "-a", "2", "--min-ack-quorum-zones", "3"),
     "--min-ack-quorum-zones 3 cannot be met with -a 2: an ack quorum of 2 bookie(s) spans at most 2 zone(s)"),
    (("simpletest", "--min-ack-quorum-zones", "17"),
     "argument --min-ack-quorum-zones: must be a whole number from 1 (no demand) to 16, got '17'"),
    (("ledgers", "rereplicate", "--all", "--min-ack-quorum-zones", "0"),
     "argument --min-ack-quorum-zones: must be a whole number from 1 (no demand) to 16, got '0'"),
    (("autorecovery", "--once", "--min-ack-quorum-zones", "x"),
     "argument --min-ack-quorum-zones: must be a whole number from 1 (no demand) to 16, got 'x'"),
])
def test_a_demand_out_of_bounds_is_refused_naming_the_flag_and_the_limit(zoned, args, words):
    with LedgerClient(zoned.metadata_uri) as client:
        before = set(client.list_ledgers())
        result = ledger(zoned, *args)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr and "Traceback" not in result.stderr
        assert set(client.list_ledgers()) == before


def test_repair_commands_accept_the_flag(zoned):
    result = ledger(zoned, "ledgers", "rereplicate", "--all", "--min-ack-quorum-zones", "2")
    assert result.returncode == 0, result.stderr
