"""Explicit LAC with real bookie processes: a tailing reader sees the last entry of a burst."""
from __future__ import annotations

import pytest

from tests.integration.conftest import PASSWORD, payload


@pytest.mark.bookies(3)
@pytest.mark.parametrize("metadata_uri", ["sqlite"], indirect=True)
def test_tailing_reader_sees_the_last_entry_of_a_burst_without_a_later_entry(bookies, make_client):
    writer = make_client(explicit_lac_interval_s=0.05).create_ledger(3, 3, 2, password=PASSWORD)
    tail = make_client().open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    burst = [writer.append_async(payload(index)) for index in range(50)]
    assert [future.result(30) for future in burst] == list(range(50))
    assert tail.wait_for_entry(49, timeout=30) is True  # entry 49 is the last one written
    assert [entry.data for entry in tail.read(40, 49)] == [payload(index) for index in range(40, 50)]
    assert not tail.is_closed and writer.last_add_confirmed == 49
    writer.close()
