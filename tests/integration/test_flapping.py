"""Ensemble-change storms (issue 12, part 9) with real bookie processes.

Two of five bookies are killed with kill -9 -- one in a writer's ensemble (E=4) and
the only one outside it -- while their registrations stay (a long lease, as a
ZooKeeper session outlives a quick failure). The writer appends for 3 s. Before the
fix it swapped the failed position between the two dead bookies about 100 times a
second, one metadata compare-and-set each (docs/measurements.md, "Ensemble-change
storms"); now the quarantine and the back-off
between changes bound it (``protocol.quarantine.max_changes``).
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.protocol.quarantine import ChangeBackoff, max_changes
from tests.integration.conftest import PASSWORD, payload

pytestmark = pytest.mark.bookies(5)
SECONDS = float(os.environ.get("PYSPARK_LEDGER_FLAP_SECONDS", "3"))
PACE_S = 0.001


@pytest.fixture
def metadata_uri(tmp_path) -> str:
    """SQLite with a 30 s lease: the dead bookies stay registered (and chosen) for the whole test."""
    return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=30&poll_interval=0.1"


def count_writes(client, ledger_id: int) -> list[int]:
    """Wrap the client's store to count the compare-and-sets of ``ledger_id`` (one list item per write)."""
    store = client._ctx.store
    writes: list[int] = []
    original = store.write_ledger

    def counted(metadata, expected_version):
        if metadata.ledger_id == ledger_id:
            writes.append(1)
        return original(metadata, expected_version)

    store.write_ledger = counted
    return writes


@pytest.mark.parametrize("how", ["kill"] + (["sigstop"] if os.environ.get("PYSPARK_LEDGER_FLAP_SIGSTOP") else []))
def test_two_failed_bookies_of_five_leave_a_bounded_number_of_fragments(bookies, make_client, how):
    """kill -9: refused at once, the storm's cause. SIGSTOP (behind an environment variable: each failure
    then takes ``add_timeout_s`` to notice, so the writer appends for 12 s; before and after the fix:
    docs/measurements.md, "Ensemble-change storms")."""
    client = make_client()
    writer = client.create_ledger(4, 3, 2, password=PASSWORD)
    writes = count_writes(client, writer.ledger_id)
    by_id = {bookie.bookie_id: bookie for bookie in bookies.bookies}
    ensemble = writer.metadata.current_fragment.bookies
    victims = [by_id[ensemble[0]], by_id[(set(by_id) - set(ensemble)).pop()]]
    assert writer.append(payload(0)) == 0
    stopped = []
    try:
        for victim in victims:
            if how == "kill":
                victim.kill()
            else:
                victim.process.send_signal(signal.SIGSTOP)
                stopped.append(victim)
        started = time.monotonic()
        end = started + (SECONDS if how == "kill" else max(SECONDS, 12.0))  # SIGSTOP: add_timeout_s is 5 s
        futures = [writer.append_async(payload(1))]
        while time.monotonic() < end:
            time.sleep(PACE_S)  # a few thousand entries: quick to read back, and the failures go on
            futures.append(writer.append_async(payload(len(futures) + 1)))
            if len(futures) > 500:
                futures[-500].result(60)
        assert [future.result(60) for future in futures] == list(range(1, len(futures) + 1))
        elapsed = time.monotonic() - started
        changes = writer.ensemble_changes
        fragments = len(writer.metadata.fragments)
        print(f"\n{how}: {len(futures) + 1} entries in {elapsed:.1f} s, {changes} ensemble changes, "
              f"{fragments} fragments, {len(writes)} metadata writes")
        assert changes <= max_changes(elapsed, ChangeBackoff())
        assert len(writes) <= changes  # one compare-and-set per change (the close comes below)
        writer.close()
        md = client.ledger_metadata(writer.ledger_id)
        assert (md.state, md.last_entry_id) == (CLOSED, len(futures))
        reader = make_client().open_ledger(writer.ledger_id, PASSWORD)
        assert [entry.data for entry in reader.read()] == [payload(i) for i in range(len(futures) + 1)]
    finally:
        for victim in stopped:
            victim.process.send_signal(signal.SIGCONT)
