"""A striped ledger (E > Qw) read with a bookie of its ensemble stopped (SIGSTOP), real bookie processes: its
connection stays open and answers nothing, so only speculative reads get past it (docs/protocol.md L5, L7)."""
from __future__ import annotations

import os
import signal

import pytest

from tests.integration.conftest import PASSWORD, payload

pytestmark = pytest.mark.bookies(5)
ENTRIES = 2_000


@pytest.fixture
def metadata_uri(tmp_path) -> str:
    """SQLite; leases outlast a bookie stopped for a few seconds (it stays registered, just silent)."""
    return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=30&poll_interval=0.1"


def test_L7_a_stopped_bookie_of_a_striped_ledger_is_read_around_by_speculative_reads(bookies, make_client):
    with make_client().create_ledger(5, 3, 2, password=PASSWORD) as writer:
        futures = [writer.append_async(payload(index, 64)) for index in range(ENTRIES)]
        [future.result(60) for future in futures]
    ensemble = writer.metadata.current_fragment.bookies
    stopped = next(bookie for bookie in bookies if bookie.bookie_id == ensemble[2])  # first replica of stripe 2
    reader = make_client(speculative_read_delay_s=0.2, read_timeout_s=20.0, read_batch_entries=100)
    stopped.pause()
    try:
        opened = reader.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        assert [entry.data for entry in opened.read()] == [payload(i, 64) for i in range(ENTRIES)]
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    stats = opened.read_stats
    # the stopped bookie's stripe of each of the 4 batches was asked of its next replica before its read timed
    # out (20 s): no answer the read used was an error (a read timeout would be one)
    assert stats["speculative_reads"] >= 4 and stats["error_answers"] == 0, stats
