"""docs/protocol.md W6 with real bookie processes: a bookie frozen with SIGSTOP (slow, not dead) does not
cause an ensemble change while Qa is reachable (``delay_ensemble_change``); writes continue."""
from __future__ import annotations

import os
import signal

import pytest

from pyspark_ledger.metadata.model import CLOSED
from tests.integration.conftest import PASSWORD, payload, wait_until


def append_all(writer, start: int, count: int) -> list[int]:
    futures = [writer.append_async(payload(index)) for index in range(start, start + count)]
    return [future.result(60) for future in futures]


@pytest.mark.bookies(4)
def test_W6_sigstopped_bookie_writes_continue_without_an_ensemble_change(bookies, make_client):
    client = make_client(add_timeout_s=1.0, delay_ensemble_change=True)
    reader_client = make_client()  # made now: a frozen bookie's registration lapses, and make_client waits for all
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    ensemble = writer.metadata.current_fragment.bookies
    victim = {bookie.bookie_id: bookie for bookie in bookies}[ensemble[1]]
    assert append_all(writer, 0, 100) == list(range(100))
    victim.pause()
    try:
        assert append_all(writer, 100, 200) == list(range(100, 300))  # confirmed by the other two (Qa = 2)
        wait_until(lambda: writer.degraded_bookies == (victim.bookie_id,),
                   what=f"the frozen bookie {victim.bookie_id} to be degraded after add_timeout_s")
        assert append_all(writer, 300, 200) == list(range(300, 500))
        assert [f.bookies for f in client.ledger_metadata(writer.ledger_id).fragments] == [ensemble], \
            "the slow bookie caused an ensemble change"
        writer.close()
        md = client.ledger_metadata(writer.ledger_id)
        assert (md.state, md.last_entry_id, [f.bookies for f in md.fragments]) == (CLOSED, 499, [ensemble])
        reader = reader_client.open_ledger(writer.ledger_id, PASSWORD)  # served around the frozen bookie
        assert [entry.data for entry in reader.read()] == [payload(index) for index in range(500)]
    finally:
        os.kill(victim.pid, signal.SIGCONT)
