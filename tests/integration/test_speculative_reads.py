"""When a read gets a speculative read, with real bookie processes (docs/protocol.md L7): not while the batch is
only read ahead (a stopped bookie holds one), and not while the client verifies an answer that has arrived."""
from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from pyspark_ledger.entry import EntryCodec
from tests.integration.conftest import PASSWORD, payload

pytestmark = pytest.mark.bookies(3)
SPECULATIVE = "speculative read to"


@pytest.fixture
def metadata_uri(tmp_path) -> str:
    """SQLite; leases outlast a bookie stopped for a few seconds."""
    return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=30&poll_interval=0.1"


@pytest.fixture
def speculations(caplog):
    """The entry ids whose batch got a speculative read, as the client logs them."""
    caplog.set_level(logging.DEBUG, logger="pyspark_ledger.client.entry_reads")

    def entry_ids() -> list[int]:
        return [record.args[1] for record in caplog.records if SPECULATIVE in record.getMessage()]
    return entry_ids


def write_closed(client, count: int):
    with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
        futures = [writer.append_async(payload(index, 64)) for index in range(count)]
        [future.result(60) for future in futures]
    return writer.ledger_id, writer.metadata.current_fragment.bookies


def test_L7_a_batch_read_ahead_is_timed_only_once_the_reader_waits_for_it(bookies, make_client, speculations):
    ledger_id, ensemble = write_closed(make_client(), 60)
    reader = make_client(speculative_read_delay_s=0.2, read_batch_entries=10, read_ahead_batches=3,
                         read_timeout_s=30.0).open_ledger(ledger_id, PASSWORD, recovery=False)
    stopped = next(bookie for bookie in bookies if bookie.bookie_id == ensemble[10 % 3])  # asked first for 10..19
    stopped.pause()
    try:
        entries = reader.read()
        head = [next(entries).data for _ in range(10)]  # 0..9; 10..19 and 20..29 are read ahead
        time.sleep(1.0)  # five times the delay, while the reader does not need 10..19 yet
        assert 10 not in speculations(), "a batch read ahead got a speculative read before the reader needed it"
        rest = [entry.data for entry in entries]  # now it waits for 10..19: slow, so the next replica serves it
        assert 10 in speculations()
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert head + rest == [payload(index, 64) for index in range(60)]


def test_L7_no_speculative_read_while_the_client_verifies_an_answer(bookies, make_client, speculations,
                                                                    monkeypatch):
    ledger_id, _ = write_closed(make_client(), 10)
    reader = make_client(speculative_read_delay_s=1.0, read_timeout_s=30.0).open_ledger(
        ledger_id, PASSWORD, recovery=False)
    decode, calls = EntryCodec.decode, []

    def slow_decode(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.5)  # the answer arrived; the client is slow, not the replica
        return decode(self, *args, **kwargs)
    monkeypatch.setattr(EntryCodec, "decode", slow_decode)
    assert [entry.data for entry in reader.read()] == [payload(index, 64) for index in range(10)]
    assert speculations() == [], "the client's own verification time counted as the replica's slowness"
    assert len(calls) == 10, "an answer was verified twice: a second replica was asked"
