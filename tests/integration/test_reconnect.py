"""Reconnecting right after a bookie restart (issue 12, part 8), with real bookie processes.

A client that saw "connection refused" from a bookie used to pass that refusal on,
instantly, to every new call for a while -- also to a fresh LedgerClient of the same
process (gRPC's subchannels and their reconnect back-off were shared) -- so a
recovery started right after the bookie was back failed with "need 1 bookie(s) ...
0 eligible ... start more bookies" although the bookie was up.
"""
from __future__ import annotations

import time

import pytest

from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.entry import master_key
from pyspark_ledger.errors import BookieUnavailableError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED
from tests.integration.conftest import CONFIG, PASSWORD, payload, wait_until

pytestmark = pytest.mark.bookies(3)
ENTRIES = 10


@pytest.fixture
def metadata_uri(tmp_path) -> str:
    """SQLite only: the reconnect logic is in the client's transport, the store does not matter here."""
    return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"


def open_ledger_and_kill(bookies, make_client):
    """A ledger of ENTRIES entries left OPEN (writer aborted), one of its bookies killed with kill -9, and a
    client that kept asking that bookie for 2 s (so its channel is deep in reconnect back-off)."""
    client = make_client()
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)  # Qa = 3: recovery must write back to all three
    for index in range(ENTRIES):
        writer.append(payload(index))
    writer.abort()
    victim = {bookie.bookie_id: bookie for bookie in bookies.bookies}[writer.metadata.current_fragment.bookies[0]]
    victim.kill()
    refusals = []
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        future = client._ctx.transport.read(victim.bookie_id, writer.ledger_id, 0, 0, timeout=2.0,
                                            master_key=master_key(PASSWORD))
        try:
            future.result(10)
        except BookieUnavailableError as exc:
            refusals.append(str(exc))
        time.sleep(0.05)
    assert refusals and all("refused" in refusal.lower() or "unavailable" in refusal for refusal in refusals)
    return client, writer.ledger_id, victim


def read_all(client, ledger_id: int) -> list[bytes]:
    return [entry.data for entry in client.open_ledger(ledger_id, PASSWORD).read()]


def test_a_fresh_client_recovers_reads_and_writes_at_once_after_a_restart(bookies, make_client, metadata_uri):
    seen, ledger_id, victim = open_ledger_and_kill(bookies, make_client)
    victim.start()  # same port, same data dir; no sleep after it
    with LedgerClient(metadata_uri, CONFIG) as fresh:
        assert read_all(fresh, ledger_id) == [payload(i) for i in range(ENTRIES)]  # recovery, then reads
        md = fresh.ledger_metadata(ledger_id)
        assert (md.state, md.last_entry_id) == (CLOSED, ENTRIES - 1)
        assert victim.bookie_id in md.fragments[-1].bookies  # recovery wrote back to it: no replacement
        wait_until(lambda: len(fresh.bookies(writable_only=True)) == 3, what="the restarted bookie to register")
        writer = fresh.create_ledger(3, 3, 3, password=PASSWORD)  # every bookie, the restarted one too
        assert [writer.append(payload(i)) for i in range(5)] == list(range(5))
        assert len(writer.metadata.fragments) == 1
        writer.close()


def test_the_client_that_saw_the_refusal_also_reconnects_at_once(bookies, make_client):
    seen, ledger_id, victim = open_ledger_and_kill(bookies, make_client)
    victim.start()
    assert read_all(seen, ledger_id) == [payload(i) for i in range(ENTRIES)]
    assert victim.bookie_id in seen.ledger_metadata(ledger_id).fragments[-1].bookies
    future = seen._ctx.transport.read(victim.bookie_id, ledger_id, 0, 0, timeout=5.0, master_key=master_key(PASSWORD))
    assert future.result(10).ok


def test_recovery_with_a_bookie_really_down_names_it_and_why(bookies, make_client, metadata_uri):
    seen, ledger_id, victim = open_ledger_and_kill(bookies, make_client)
    with LedgerClient(metadata_uri, CONFIG) as fresh:
        with pytest.raises(RecoveryError) as info:
            fresh.open_ledger(ledger_id, PASSWORD)
    message = str(info.value)
    assert f"Bookies that failed this client: {victim.bookie_id}: " in message, message
    assert "refused" in message.lower(), message
