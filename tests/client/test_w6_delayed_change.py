"""docs/protocol.md W6 over fake bookies: a slow or failed bookie causes no spurious ensemble change
while Qa is reachable (``delay_ensemble_change``); the next failure that would block confirmation
makes one change replacing every failed bookie. With the flag off: today's immediate change.
"""
from __future__ import annotations

import logging

import pytest

from pyspark_ledger import ClientConfig
from pyspark_ledger.errors import InvalidConfigurationError
from tests.client.conftest import PASSWORD, Gate, wait_until
from tests.client.invariants import Confirmed, check_invariants

TIMEOUT_S = 0.3  # add_timeout_s: how long a silent bookie takes to count as failed
WRITER_LOG = "pyspark_ledger.client.writer"


def write_confirmed(writer, confirmed: Confirmed, start: int, count: int) -> list[int]:
    return [confirmed.append(writer, b"entry-%d" % index).result(10) for index in range(start, start + count)]


def stored_version(store, ledger_id: int) -> int:
    return store.read_ledger(ledger_id).version


def make_slow(cluster, bookie: str, how: str):
    """``silent``: the bookie stores adds but its answers never come; ``error``: it answers IO_ERROR."""
    return cluster.hold(bookie, op="add") if how == "silent" else cluster.fail(bookie, op="add")


def degraded_records(caplog, bookie: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == WRITER_LOG and "degraded" in r.getMessage()
            and bookie in r.getMessage()]


@pytest.mark.bookies(5)
@pytest.mark.parametrize("how", ["silent", "error"])
def test_W6_degraded_bookie_no_change_until_second_failure_replaces_both(how, make_client, cluster, store,
                                                                         caplog):
    caplog.set_level(logging.INFO, logger=WRITER_LOG)
    client = make_client(add_timeout_s=TIMEOUT_S, delay_ensemble_change=True)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    ledger_id = writer.ledger_id
    first, second, third = writer.metadata.current_fragment.bookies
    created = stored_version(store, ledger_id)
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 0, 3)
    rule = make_slow(cluster, second, how)
    assert write_confirmed(writer, confirmed, 3, 5) == [3, 4, 5, 6, 7]  # Qa = 2 from the other two
    wait_until(lambda: writer.degraded_bookies == (second,), what=f"bookie {second} to be degraded")

    # No spurious ensemble change: the stored metadata was never written again.
    assert stored_version(store, ledger_id) == created and len(store.history[ledger_id]) == 1
    assert [f.bookies for f in writer.metadata.fragments] == [(first, second, third)]
    degraded_from = writer.last_add_confirmed + 1
    assert write_confirmed(writer, confirmed, 8, 6) == list(range(8, 14))  # adds keep being confirmed
    assert stored_version(store, ledger_id) == created, "a degraded bookie caused a metadata change"
    for entry_id in range(max(degraded_from, 8), 14):  # written while degraded: Qa copies, not Qw
        assert cluster.holders(ledger_id, entry_id) == {first, third}
    assert len(degraded_records(caplog, second)) == 1, "the under-replication is logged once per bookie"

    # A second failure: entries can no longer reach Qa = 2 -> one change replaces both bookies.
    gate = Gate()
    remove_hook = store.before_write(gate.hook)
    cluster.set_down(third)
    pending = [confirmed.append(writer, b"entry-%d" % index) for index in range(14, 17)]
    assert gate.reached.wait(10), "no ensemble change after the second failure"
    assert not any(f.done() for f in pending), "a confirmation completed during the ensemble change"
    assert writer.degraded_bookies == ()
    remove_hook()
    gate.open()
    assert [f.result(10) for f in pending] == [14, 15, 16]
    fragments = writer.metadata.fragments
    assert [f.first_entry_id for f in fragments] == [0, 14], "not exactly one ensemble change"
    new_bookies = fragments[1].bookies
    assert new_bookies[0] == first and not {second, third} & set(new_bookies)
    assert all(set(new_bookies) <= cluster.holders(ledger_id, e) for e in range(14, 17)), "re-sends missing"
    rule.release()
    writer.close()
    assert len(client.ledger_metadata(ledger_id).fragments) == 2
    check_invariants(client, make_client(seed=2), store, ledger_id, PASSWORD, confirmed)


def test_W6_flag_off_a_silent_bookie_is_replaced(make_client, cluster, store):
    client = make_client(add_timeout_s=TIMEOUT_S)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    second = writer.metadata.current_fragment.bookies[1]
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 0, 3)
    rule = cluster.hold(second, op="add")
    write_confirmed(writer, confirmed, 3, 3)
    wait_until(lambda: second not in writer.metadata.current_fragment.bookies,
               what=f"the silent bookie {second} to be replaced")
    assert writer.degraded_bookies == ()
    assert len(writer.metadata.fragments) == 2 and stored_version(store, writer.ledger_id) > 0
    write_confirmed(writer, confirmed, 6, 2)
    rule.release()
    writer.close()
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_W6_late_answers_of_a_slow_bookie_change_nothing(make_client, cluster, store):
    """Answers slower than add_timeout_s: degraded; when they finally arrive nothing changes."""
    client = make_client(add_timeout_s=TIMEOUT_S, delay_ensemble_change=True)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    first, second, slow = writer.metadata.current_fragment.bookies
    confirmed = Confirmed()
    rule = cluster.hold(slow, op="add")
    write_confirmed(writer, confirmed, 0, 4)
    wait_until(lambda: writer.degraded_bookies == (slow,), what="the slow bookie to be degraded")
    rule.release()  # its parked answers for entries 0..3 reach the writer now
    cluster.settle()
    assert write_confirmed(writer, confirmed, 4, 4) == [4, 5, 6, 7]
    assert writer.degraded_bookies == (slow,)  # stays degraded until replaced (not re-admitted)
    assert cluster.holders(writer.ledger_id, 7) == {first, second}
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert [f.bookies for f in md.fragments] == [(first, second, slow)]
    assert len(store.history[writer.ledger_id]) == 2  # created, then closed: no ensemble change
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.bookies(3)
def test_W6_a_degraded_bookie_needs_no_spare(make_client, cluster, store):
    """With no spare bookie a failure would stop the writer (W4); delayed, writes go on with Qa."""
    client = make_client(delay_ensemble_change=True)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    down = writer.metadata.current_fragment.bookies[0]
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 0, 2)
    cluster.set_down(down)
    assert write_confirmed(writer, confirmed, 2, 2) == [2, 3]
    wait_until(lambda: writer.degraded_bookies == (down,), what=f"bookie {down} to be degraded")
    assert write_confirmed(writer, confirmed, 4, 4) == [4, 5, 6, 7]
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.last_entry_id, len(md.fragments)) == (7, 1)
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_W6_qw_equal_qa_cannot_delay_the_change(make_client, cluster):
    client = make_client(add_timeout_s=TIMEOUT_S, delay_ensemble_change=True)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    silent = writer.metadata.current_fragment.bookies[2]
    cluster.drop_reply(silent, op="add")
    assert writer.append(b"x") == 0  # confirmed only once the replacement has it
    assert silent not in writer.metadata.current_fragment.bookies and writer.degraded_bookies == ()
    writer.close()


def test_delay_ensemble_change_is_off_by_default_and_checked():
    assert ClientConfig().delay_ensemble_change is False
    with pytest.raises(InvalidConfigurationError, match="delay_ensemble_change must be True or False"):
        ClientConfig(delay_ensemble_change="yes")


def test_W6_read_only_bookie_is_replaced_at_once_even_when_delaying(make_client, cluster, store):
    client = make_client(delay_ensemble_change=True)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    full = writer.metadata.current_fragment.bookies[1]
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 0, 2)
    cluster.set_read_only(full)  # answers READ_ONLY to adds (disk full)
    write_confirmed(writer, confirmed, 2, 2)
    wait_until(lambda: full not in writer.metadata.current_fragment.bookies,
               what=f"the read-only bookie {full} to be replaced")
    assert writer.degraded_bookies == () and len(writer.metadata.fragments) == 2
    writer.close()
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)
