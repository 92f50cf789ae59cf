"""WriteLac (explicit LAC) against a real bookie process: statuses, max semantics, long polls woken."""
from __future__ import annotations

import threading

from pyspark_ledger.client import BookieStatus
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import KEY, WRONG_KEY, entry


def add_entries(client, ledger_id: int, count: int) -> None:
    """Entries 0..count-1, each carrying the LAC of the one before (so the bookie's LAC is count - 2)."""
    with client.add_stream() as stream:
        futures = [stream.add(ledger_id, e, KEY, entry(ledger_id, e)) for e in range(count)]
        assert all(future.result(30).ok for future in futures)


def test_write_lac_raises_the_lac_and_never_lowers_it(bookie, client_for):
    client = client_for(bookie)
    add_entries(client, 900, 5)
    assert client.read_lac(900, master_key=KEY).last_add_confirmed == 3
    raised = client.write_lac(900, KEY, 4)
    assert (raised.status, raised.last_add_confirmed, raised.fenced) == (BookieStatus.OK, 4, False)
    assert client.read_lac(900, master_key=KEY).last_add_confirmed == 4
    assert client.read(900, 0, master_key=KEY).last_add_confirmed == 4
    lower = client.write_lac(900, KEY, 1)
    assert lower.ok and lower.last_add_confirmed == 4
    assert client.read_lac(900, master_key=KEY).last_add_confirmed == 4


def test_write_lac_statuses(bookie, client_for, raw_stub):
    client = client_for(bookie)
    unknown = client.write_lac(901, KEY, 0)
    assert unknown.status == BookieStatus.NO_SUCH_LEDGER and "901" in unknown.message
    assert client.read_lac(901, master_key=KEY).status == BookieStatus.NO_SUCH_LEDGER  # not created by the WriteLac
    add_entries(client, 901, 3)
    wrong = client.write_lac(901, WRONG_KEY, 2)
    assert wrong.status == BookieStatus.UNAUTHORIZED and "master key" in wrong.message
    assert client.read_lac(901, master_key=KEY).last_add_confirmed == 1
    stub = raw_stub(bookie)
    no_key = stub.WriteLac(pb.WriteLacRequest(ledger_id=901, last_add_confirmed=2), timeout=30)
    assert no_key.status == pb.UNAUTHORIZED and "needs its master key" in no_key.message
    assert no_key.last_add_confirmed == -1
    below = stub.WriteLac(pb.WriteLacRequest(ledger_id=901, master_key=KEY, last_add_confirmed=-2), timeout=30)
    assert below.status == pb.BAD_REQUEST and "-2" in below.message
    assert client.read_lac(901, master_key=KEY).last_add_confirmed == 1


def test_a_fenced_ledger_still_accepts_write_lac(bookie, client_for):
    """The value only names entries its writer already confirmed, which recovery keeps."""
    client = client_for(bookie)
    add_entries(client, 902, 4)
    assert client.read(902, 0, fence=True, master_key=KEY).fenced
    accepted = client.write_lac(902, KEY, 3)
    assert (accepted.status, accepted.last_add_confirmed, accepted.fenced) == (BookieStatus.OK, 3, True)


def test_write_lac_wakes_a_long_poll(bookie, client_for):
    client = client_for(bookie)
    add_entries(client, 903, 3)
    answers = []
    poller = threading.Thread(
        target=lambda: answers.append(client.read_lac(903, previous=1, timeout=60, master_key=KEY)))
    poller.start()
    try:
        assert client.write_lac(903, KEY, 2).ok
    finally:
        poller.join(90)
    assert not poller.is_alive()
    assert answers[0].status == BookieStatus.OK and answers[0].last_add_confirmed == 2


def test_write_lac_async_answers_like_the_blocking_form(bookie, client_for):
    client = client_for(bookie)
    add_entries(client, 905, 1)  # entry 0 carries LAC -1
    unchanged = client.write_lac_async(905, KEY, -1).result(30)
    assert unchanged.ok and unchanged.last_add_confirmed == -1
    raised = client.write_lac_async(905, KEY, 0).result(30)
    assert raised.ok and raised.last_add_confirmed == 0
    assert client.write_lac_async(906, KEY, 0).result(30).status == BookieStatus.NO_SUCH_LEDGER
