"""Write path over fake bookies: docs/protocol.md W1-W5 and W8, add timeouts, input checks."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import (EntryTooLargeError, InvalidArgumentError, InvalidConfigurationError,
                                   LedgerFencedError, NotEnoughBookiesError, UnauthorizedError)
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, OPEN
from pyspark_ledger.testing.fake_bookie_store import FakeLedger
from tests.client.conftest import PASSWORD, Gate, wait_until
from tests.client.invariants import Confirmed, check_invariants


def write_confirmed(writer, confirmed: Confirmed, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        confirmed.append(writer, b"entry-%d" % index).result(10)


def test_W1_out_of_order_replies_confirm_in_entry_order(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    held = cluster.hold(op="add", entry_id=2)  # every replica's answer for entry 2 waits
    futures = [confirmed.append(writer, b"entry-%d" % i) for i in range(6)]
    cluster.settle()
    assert [f.done() for f in futures] == [True, True, False, False, False, False]
    assert writer.last_add_confirmed == 1
    held.release()
    assert [f.result(10) for f in futures] == list(range(6))
    assert confirmed.order == list(range(6)) and writer.last_add_confirmed == 5
    writer.close()
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_W1_lac_is_highest_contiguous_when_first_entry_lags(client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    held = cluster.hold(op="add", entry_id=0)
    futures = [writer.append_async(b"x") for _ in range(4)]
    cluster.settle()
    assert writer.last_add_confirmed == -1 and not any(f.done() for f in futures)
    held.release()
    assert [f.result(10) for f in futures] == [0, 1, 2, 3]


def test_W2_failed_bookie_is_replaced_from_first_unconfirmed_entry(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    first, second, third = writer.metadata.current_fragment.bookies
    spare = (set(cluster.bookies) - {first, second, third}).pop()
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 5)
    held_first = cluster.hold(first, op="add")
    held_second = cluster.hold(second, op="add")
    pending = [confirmed.append(writer, b"entry-%d" % i) for i in range(5, 10)]
    cluster.settle()
    gate = Gate()
    store.before_write(gate.hook)
    cluster.set_down(first)  # its held answers fail: the stream broke
    assert gate.reached.wait(10)
    held_second.release()  # now two acks per entry, but a change is in progress
    cluster.settle()
    assert not any(f.done() for f in pending), "a confirmation completed during the ensemble change"
    gate.open()
    assert [f.result(10) for f in pending] == list(range(5, 10))
    fragments = writer.metadata.fragments
    assert [f.first_entry_id for f in fragments] == [0, 5]
    assert fragments[1].bookies == (spare, second, third)
    assert all(spare in cluster.holders(writer.ledger_id, e) for e in range(5, 10)), "unconfirmed not re-sent"
    write_confirmed(writer, confirmed, 3, start=10)
    held_first.release()
    writer.close()
    assert len(client.ledger_metadata(writer.ledger_id).fragments) == 2, "more than one ensemble change"
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.bookies(5)
def test_W3_second_failure_during_change_replaces_both(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    first, second, third = writer.metadata.current_fragment.bookies
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 5)
    held = [cluster.hold(bookie, op="add") for bookie in (first, second)]
    pending = [confirmed.append(writer, b"entry-%d" % i) for i in range(5, 8)]
    cluster.settle()
    gate = Gate()
    remove_hook = store.before_write(gate.hook)
    cluster.set_down(first)
    assert gate.reached.wait(10)
    cluster.set_down(second)  # fails during the first change
    cluster.settle()
    remove_hook()
    gate.open()
    assert [f.result(10) for f in pending] == [5, 6, 7]
    current = writer.metadata.current_fragment
    assert current.first_entry_id == 5 and first not in current.bookies and second not in current.bookies
    assert current.bookies[2] == third
    for rule in held:
        rule.release()
    writer.close()
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.bookies(3)
def test_W4_no_spare_bookie_fails_adds_and_keeps_confirmed_prefix(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 5)
    cluster.set_down(writer.metadata.current_fragment.bookies[1])
    failed = confirmed.append(writer, b"entry-5")
    with pytest.raises(NotEnoughBookiesError, match="start more bookies"):
        failed.result(10)
    with pytest.raises(NotEnoughBookiesError):
        writer.append(b"more")
    assert writer.last_add_confirmed == 4
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, len(md.fragments)) == (CLOSED, 4, 1)
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.parametrize("state", [IN_RECOVERY, CLOSED])
def test_W5_metadata_moved_by_another_client_during_change_stops_writer(state, client, make_client, cluster,
                                                                          store):
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 4)
    moved = []

    def other_client_moves_it(metadata, version) -> None:
        if not moved:
            stored = store.inner.read_ledger(metadata.ledger_id)
            changed = stored.value.with_changes(state=state, last_entry_id=3 if state == CLOSED else -1,
                                                length=writer.length if state == CLOSED else 0)
            store.inner.write_ledger(changed, stored.version)
            store.history[metadata.ledger_id].append(changed)
            moved.append(changed)
    store.before_write(other_client_moves_it)
    cluster.set_down(writer.metadata.current_fragment.bookies[0])
    pending = [confirmed.append(writer, b"late-%d" % i) for i in range(3)]
    for future in pending:
        with pytest.raises(LedgerFencedError, match=state):
            future.result(10)
    with pytest.raises(LedgerFencedError):
        writer.append(b"after")
    stored = client.ledger_metadata(writer.ledger_id)
    assert stored == moved[0], "the writer overwrote another client's metadata"
    if state == IN_RECOVERY:
        with pytest.raises(LedgerFencedError, match="being recovered"):
            writer.close()
    else:
        writer.close()  # closed elsewhere at this writer's own LAC: the close agrees (C3)
    cluster.set_down(writer.metadata.current_fragment.bookies[0], down=False)
    recoverer = make_client(seed=3)
    recoverer.open_ledger(writer.ledger_id, PASSWORD)
    check_invariants(client, recoverer, store, writer.ledger_id, PASSWORD, confirmed)


def test_W8_wrong_password_is_refused_on_open(client):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"x")
    for recovery in (True, False):
        with pytest.raises(UnauthorizedError, match="wrong password"):
            client.open_ledger(writer.ledger_id, b"not the password", recovery=recovery)
    assert client.ledger_metadata(writer.ledger_id).state == OPEN, "a refused open changed the ledger"


def test_W8_wrong_master_key_at_bookie_is_unauthorized_and_nothing_written(client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    stranger = writer.metadata.current_fragment.bookies[1]
    cluster.network.call(lambda: cluster[stranger].ledgers.__setitem__(writer.ledger_id, FakeLedger(b"other key")))
    with pytest.raises(UnauthorizedError, match="another master key"):
        writer.append(b"x")
    assert not cluster.holders(writer.ledger_id, 0) & {stranger}
    with pytest.raises(UnauthorizedError):
        writer.append(b"y")


def test_W8_fence_with_wrong_master_key_is_unauthorized(cluster):
    transport = cluster.transport()
    try:
        assert transport.add("bookie-0", 9, 0, b"right", _body(9, 0)).result(5).ok
        refused = transport.read("bookie-0", 9, 0, 0, fence=True, master_key=b"wrong").result(5)
        assert refused.status.name == "UNAUTHORIZED" and not cluster["bookie-0"].is_fenced(9)
        refused_add = transport.add("bookie-0", 9, 1, b"wrong", _body(9, 1)).result(5)
        assert refused_add.status.name == "UNAUTHORIZED" and not cluster["bookie-0"].has_entry(9, 1)
    finally:
        transport.close()


def _body(ledger_id: int, entry_id: int) -> bytes:
    from pyspark_ledger.entry import EntryCodec
    return EntryCodec().encode(ledger_id, entry_id, entry_id - 1, 1, b"x")


def test_silent_bookie_times_out_into_an_ensemble_change(make_client, cluster):
    client = make_client(add_timeout_s=0.3)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    silent = writer.metadata.current_fragment.bookies[2]
    cluster.drop_reply(silent, op="add")
    assert writer.append(b"x") == 0
    assert silent not in writer.metadata.current_fragment.bookies
    assert len(writer.metadata.fragments) == 1  # nothing was confirmed before: the fragment was replaced
    writer.close()


def test_fenced_answer_is_fatal_not_a_bookie_failure(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"a")
    make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)  # recovery fences
    with pytest.raises(LedgerFencedError, match="may or may not"):
        writer.append(b"b")
    assert len(client.ledger_metadata(writer.ledger_id).fragments) == 1, "fencing caused an ensemble change"


@pytest.mark.parametrize("quorums", [(2, 3, 2), (3, 2, 3), (3, 0, 0), (0, 0, 0)])
def test_quorums_must_satisfy_e_ge_qw_ge_qa(client, quorums):
    with pytest.raises(InvalidConfigurationError) as raised:
        client.create_ledger(*quorums, password=PASSWORD)
    assert isinstance(raised.value, ValueError)


def test_bad_inputs_get_clear_errors(client):
    with pytest.raises(InvalidArgumentError, match="bytes"):
        client.create_ledger(3, 3, 2, password=12)
    with pytest.raises(InvalidArgumentError, match="custom_metadata"):
        client.create_ledger(3, 3, 2, custom_metadata={"app": "text"})
    with pytest.raises(InvalidConfigurationError, match="digest"):
        client.create_ledger(3, 3, 2, digest="md5")
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    with pytest.raises(InvalidArgumentError, match="encode"):
        writer.append("text")
    with pytest.raises(EntryTooLargeError, match="max_entry_bytes"):
        writer.append(bytes(client.config.max_entry_bytes))
    with pytest.raises(NotEnoughBookiesError):
        client.create_ledger(5, 3, 2)


def test_a_bookie_that_failed_before_is_taken_back_when_no_fresh_one_is_left(client, make_client, cluster, store):
    """4 bookies, E=3: one failure used the only spare; when a second bookie fails, the first one (back up,
    maybe it was only slow) is the only candidate. It is taken back rather than failing the writer, and
    watched again: when it fails a second time, it is replaced again."""
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    first, second, third = writer.metadata.current_fragment.bookies
    confirmed = Confirmed()
    write_confirmed(writer, confirmed, 3)
    cluster.set_down(second)
    write_confirmed(writer, confirmed, 3, start=3)  # second replaced by the spare
    cluster.set_down(second, False)
    cluster.set_down(third)
    write_confirmed(writer, confirmed, 3, start=6)  # no fresh bookie: second comes back
    # (after the back-off between changes of a streak, protocol.quarantine; meanwhile Qa is met without third)
    wait_until(lambda: second in writer.metadata.fragments[-1].bookies, what="the second change")
    cluster.set_down(third, False)
    cluster.set_down(second)
    write_confirmed(writer, confirmed, 3, start=9)  # its new failure is not ignored: replaced by third
    wait_until(lambda: second not in writer.metadata.fragments[-1].bookies, what="the third change")
    writer.close()
    fragments = client.ledger_metadata(writer.ledger_id).fragments
    assert len(fragments) == 4 and second not in fragments[-1].bookies and third in fragments[-1].bookies
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_a_writer_stops_at_the_largest_entry_id_with_an_error_that_says_to_roll(client, monkeypatch):
    # bookies refuse entry ids past pyspark_ledger.entry.MAX_ENTRY_ID (BAD_REQUEST, as a hostile id): a writer
    # that reached it must not send one (every bookie would refuse, and ensemble changes could not help)
    from pyspark_ledger import entry as entry_format
    from pyspark_ledger.errors import LedgerFullError

    monkeypatch.setattr(entry_format, "MAX_ENTRY_ID", 4)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    assert [writer.append(b"entry-%d" % i) for i in range(5)] == list(range(5))
    with pytest.raises(LedgerFullError, match="largest entry id .4.*new ledger"):
        writer.append(b"one too many")
    writer.close()
    assert client.ledger_metadata(writer.ledger_id).last_entry_id == 4
