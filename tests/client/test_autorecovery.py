"""AutoRecovery over fake bookies and a scripted clock: only bookies gone for the delay are re-replicated."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.autorecovery import AutoRecovery
from pyspark_ledger.errors import InvalidConfigurationError, LedgerFencedError
from pyspark_ledger.metadata.model import CLOSED, OPEN
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
    assert recovery.run_once().as_dict() == {"lost_bookies": [], "recovered": [], "repaired": [], "failed": []}
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
    [failed] = report.failed
    assert failed["ledger_id"] == foreign
    assert "skipped" in failed["error"] and "none of the 1 passwords given matches" in failed["error"]
    assert victim in client.ledger_metadata(open_writer.ledger_id).fragments[-1].bookies, "left to its writer"
    now[0] = 60.0
    assert recovery.run_once().repaired == [], "nothing left to do"
    open_writer.append(b"the writer replaces the lost bookie itself")
    open_writer.close()
    now[0] = 70.0
    assert [r["ledger_id"] for r in recovery.run_once().repaired] == [open_writer.ledger_id], \
        "once closed, its first fragment (still naming the lost bookie) is sealed and repaired"


def test_an_open_ledger_on_a_lost_bookie_is_recovered_after_the_grace_period_then_repaired(client, cluster):
    dead = client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(7):
        dead.append(b"d%d" % index)
    dead.abort("its process died")                         # no close: the ledger stays OPEN
    idle = client.create_ledger(3, 3, 2, password=PASSWORD)
    idle.append(b"i0")
    victim = sorted(set(dead.metadata.fragments[0].bookies) & set(idle.metadata.fragments[0].bookies))[0]
    now = [0.0]
    recovery = AutoRecovery(client, PASSWORD, delay_s=10, interval_s=1, open_grace_s=30, clock=lambda: now[0])
    never = AutoRecovery(client, PASSWORD, delay_s=10, interval_s=1, open_grace_s=None, clock=lambda: now[0])
    cluster.set_down(victim, deregister=True)
    for at in (0.0, 10.0, 39.0):
        now[0] = at
        report = recovery.run_once()
        assert report.recovered == [] and report.repaired == [], f"within the grace period (t={at})"
        assert never.run_once().recovered == []
    assert client.ledger_metadata(dead.ledger_id).state == OPEN
    now[0] = 40.0
    report = recovery.run_once()
    assert sorted(report.recovered) == sorted([dead.ledger_id, idle.ledger_id])
    assert dead.ledger_id in [r["ledger_id"] for r in report.repaired] and report.failed == []
    for ledger_id in (dead.ledger_id, idle.ledger_id):  # (a recovery's write-back may replace it itself)
        md = client.ledger_metadata(ledger_id)
        assert md.state == CLOSED and all(victim not in fragment.bookies for fragment in md.fragments)
    assert client.ledger_metadata(dead.ledger_id).last_entry_id == 6
    reader = client.open_ledger(dead.ledger_id, PASSWORD, recovery=False)
    assert [entry.data for entry in reader.read(0, 6)] == [b"d%d" % index for index in range(7)]
    with pytest.raises(LedgerFencedError):
        idle.append(b"an idle writer that outlived the grace period is fenced")
    now[0] = 200.0
    assert never.run_once().recovered == [], "open_grace_s=None never fences"
    assert recovery.run_once().as_dict()["recovered"] == []


class CountingClient:
    """The client, counting the ledger metadata AutoRecovery reads."""

    def __init__(self, client) -> None:
        self._client, self.reads = client, 0

    def ledger_metadata(self, ledger_id):
        self.reads += 1
        return self._client.ledger_metadata(ledger_id)

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_rounds_read_ledger_metadata_only_when_something_can_need_repair(client, cluster):
    ensembles: dict[int, tuple] = {}
    ledgers = [closed_ledger(client, ensembles) for _ in range(3)]
    counting, now = CountingClient(client), [0.0]
    recovery = AutoRecovery(counting, PASSWORD, delay_s=30, interval_s=1, full_scan_every=5, clock=lambda: now[0])

    def round_reads() -> int:
        before = counting.reads
        recovery.run_once()
        now[0] += 1
        return counting.reads - before
    assert round_reads() == len(ledgers), "the first round scans"
    assert [round_reads() for _ in range(5)] == [0, 0, 0, 0, len(ledgers)], "then one scan every 5 rounds"
    cluster.add_bookie("bookie-new")                       # a bookie joining needs no scan
    assert round_reads() == 0
    victim = ensembles[ledgers[0]][0]
    cluster.set_down(victim, deregister=True)              # one leaving does
    assert round_reads() == len(ledgers)
    assert round_reads() == len(ledgers), "while it is absent, every round scans"
    now[0] += 30
    report = recovery.run_once()
    assert report.scanned and report.lost_bookies == [victim] and report.repaired
    assert all(victim not in client.ledger_metadata(lid).fragments[0].bookies for lid in ledgers)
    now[0] += 1
    assert round_reads() == len(ledgers), "the round after the repair scans once more and finds nothing"
    assert round_reads() == 0 and not recovery.run_once().scanned


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


@pytest.mark.parametrize("kwargs", [dict(delay_s=-1), dict(interval_s=0), dict(delay_s="60"), dict(interval_s=True),
                                    dict(open_grace_s=-1), dict(open_grace_s="30"), dict(full_scan_every=0),
                                    dict(full_scan_every=2.5)])
def test_bad_settings_are_refused(client, kwargs):
    with pytest.raises(InvalidConfigurationError):
        AutoRecovery(client, PASSWORD, **kwargs)
