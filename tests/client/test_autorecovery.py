"""AutoRecovery over fake bookies and a scripted clock: only bookies gone for the delay are re-replicated."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.autorecovery import AutoRecovery
from pyspark_ledger.errors import InvalidConfigurationError
from tests.client.conftest import PASSWORD


def closed_ledger(client, ensemble_of, password=PASSWORD) -> int:
    with client.create_ledger(3, 2, 2, password=password) as writer:
        for index in range(9):
            writer.append(b"e%d" % index)
        ensemble_of[writer.ledger_id] = writer.metadata.fragments[0].bookies
        return writer.ledger_id


def test_a_bookie_gone_for_the_delay_is_re_replicated_once_and_a_restart_is_not(client, cluster):
    ensembles: dict[int, tuple] = {}
    closed = [closed_ledger(client, ensembles) for _ in range(4)]
    foreign = closed_ledger(client, ensembles, password=b"another")
    open_writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    open_writer.append(b"still open")
    # 4 bookies, ensembles of 3: any three ensembles share a bookie
    [victim, *_] = sorted(set(ensembles[closed[0]]) & set(ensembles[foreign])
                          & set(open_writer.metadata.fragments[0].bookies))
    now = [0.0]
    recovery = AutoRecovery(client, PASSWORD, delay_s=30, interval_s=1, clock=lambda: now[0])
    assert recovery.run_once().lost_bookies == []

    cluster.set_down(victim, deregister=True)             # a restart: back within the delay
    now[0] = 10.0
    assert recovery.run_once().as_dict() == {"lost_bookies": [], "repaired": [], "failed": []}
    cluster.set_down(victim, False)
    cluster.registered.add(victim)
    now[0] = 20.0
    recovery.run_once()
    cluster.set_down(victim, deregister=True)             # gone again, for good this time
    now[0] = 25.0
    recovery.run_once()
    now[0] = 54.0
    assert recovery.run_once().repaired == [], "the delay starts again at each absence"
    now[0] = 56.0
    report = recovery.run_once()
    holding = sorted(lid for lid, ensemble in ensembles.items() if victim in ensemble and lid != foreign)
    assert report.lost_bookies == [victim]
    assert sorted(r["ledger_id"] for r in report.repaired) == holding
    for ledger_id in holding:
        assert victim not in client.ledger_metadata(ledger_id).fragments[0].bookies
    assert report.failed == [{"ledger_id": foreign, "error": "written with another password: skipped"}]
    assert victim in client.ledger_metadata(open_writer.ledger_id).fragments[-1].bookies, "left to its writer"
    now[0] = 60.0
    assert recovery.run_once().repaired == [], "nothing left to do"
    open_writer.append(b"the writer replaces the lost bookie itself")
    open_writer.close()
    now[0] = 70.0
    assert [r["ledger_id"] for r in recovery.run_once().repaired] == [open_writer.ledger_id], \
        "once closed, its first fragment (still naming the lost bookie) is sealed and repaired"


def test_run_loops_until_stopped_and_reports_each_round(client):
    rounds = []
    stop = threading.Event()

    def on_round(report):
        rounds.append(report)
        if len(rounds) == 3:
            stop.set()
    recovery = AutoRecovery(client, PASSWORD, delay_s=0, interval_s=0.01, on_round=on_round)
    runner = threading.Thread(target=recovery.run, args=(stop,))
    runner.start()
    runner.join(10)
    assert not runner.is_alive() and len(rounds) == 3


@pytest.mark.parametrize("kwargs", [dict(delay_s=-1), dict(interval_s=0), dict(delay_s="60"), dict(interval_s=True)])
def test_bad_settings_are_refused(client, kwargs):
    with pytest.raises(InvalidConfigurationError):
        AutoRecovery(client, PASSWORD, **kwargs)
