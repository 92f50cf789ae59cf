"""Close over fake bookies: docs/protocol.md C1-C3, and the client's thread hygiene."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.errors import LedgerClosedError, LedgerFencedError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY
from tests.client.conftest import FAST, PASSWORD
from tests.client.invariants import Confirmed, check_invariants


def test_C1_close_records_lac_and_total_length(client, make_client, store):
    payloads = [b"a" * 10, b"bb" * 7, b"", b"c" * 100]
    with client.create_ledger(3, 3, 2, password=PASSWORD, custom_metadata={"app": b"x"}) as writer:
        for payload in payloads:
            writer.append(payload)
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (CLOSED, 3, sum(map(len, payloads)))
    assert md.custom_metadata == {"app": b"x"}
    entries = check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD)
    assert [data for _, data in entries] == payloads


def test_C1_close_of_an_empty_ledger(client, store):
    client.create_ledger(3, 3, 2, password=PASSWORD).close()
    (ledger_id,) = client.list_ledgers()
    md = client.ledger_metadata(ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (CLOSED, -1, 0)
    reader = client.open_ledger(ledger_id, PASSWORD)
    assert (reader.is_closed, reader.last_add_confirmed, list(reader.read())) == (True, -1, [])


def test_C2_close_waits_for_adds_in_flight(client, make_client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    futures = [confirmed.append(writer, b"p%d" % i) for i in range(200)]
    writer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert client.ledger_metadata(writer.ledger_id).last_entry_id == 199
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_C2_stuck_add_fails_at_close_timeout_and_close_is_at_lac(make_client, cluster, store):
    client = make_client(close_timeout_s=0.2, add_timeout_s=60.0)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    confirmed.append(writer, b"first").result(10)
    ensemble = writer.metadata.current_fragment.bookies
    rules = [cluster.hold(bookie, op="add", entry_id=1) for bookie in ensemble[:2]]
    stuck = confirmed.append(writer, b"stuck")
    writer.close()
    with pytest.raises(LedgerClosedError, match="closed before this add was confirmed"):
        stuck.result(10)
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (CLOSED, 0, 5)
    for rule in rules:
        rule.release()
    check_invariants(client, make_client(seed=2), store, writer.ledger_id, PASSWORD, confirmed)


def test_C2_add_after_close_and_double_close(client):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"x")
    writer.close()
    with pytest.raises(LedgerClosedError, match="takes no more adds"):
        writer.append(b"y")
    with pytest.raises(LedgerClosedError):
        writer.append_async(b"y")
    writer.close()  # idempotent
    writer.close()
    assert client.ledger_metadata(writer.ledger_id).last_entry_id == 0


def test_C2_double_close_repeats_a_failed_close(client, make_client):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"x")
    make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=True)
    for _ in range(2):  # recovered at entry 0 like the writer's LAC: the close agrees
        writer.close()
    other = client.create_ledger(3, 3, 2, password=PASSWORD)
    other.append(b"y")
    stored = client.ledger_metadata(other.ledger_id)
    client._ctx.store.write_ledger(stored.with_changes(state=IN_RECOVERY), 0)
    for _ in range(2):
        with pytest.raises(LedgerFencedError, match="being recovered"):
            other.close()


def _race(store, writer, mutate):
    """Just before the writer's close CAS, another client changes the metadata."""
    done = []

    def hook(metadata, version) -> None:
        if not done and metadata.state == CLOSED:
            stored = store.inner.read_ledger(metadata.ledger_id)
            changed = mutate(stored.value)
            store.inner.write_ledger(changed, stored.version)
            store.history[metadata.ledger_id].append(changed)
            done.append(changed)
    store.before_write(hook)
    return done


def test_C3_closed_elsewhere_at_same_entry_is_success(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"abc")
    done = _race(store, writer, lambda md: md.with_changes(state=CLOSED, last_entry_id=0, length=3))
    writer.close()
    assert client.ledger_metadata(writer.ledger_id) == done[0]


def test_C3_closed_elsewhere_at_other_entry_is_an_error_and_not_overwritten(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"abc")
    writer.append(b"def")
    done = _race(store, writer, lambda md: md.with_changes(state=CLOSED, last_entry_id=0, length=3))
    with pytest.raises(LedgerFencedError, match="closed at entry 0"):
        writer.close()
    assert client.ledger_metadata(writer.ledger_id) == done[0]


def test_C3_in_recovery_is_an_error_and_not_overwritten(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"abc")
    done = _race(store, writer, lambda md: md.with_changes(state=IN_RECOVERY))
    with pytest.raises(LedgerFencedError, match="being recovered"):
        writer.close()
    assert client.ledger_metadata(writer.ledger_id) == done[0]


def test_C3_unrelated_change_is_retried(client, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    writer.append(b"abc")
    done = _race(store, writer, lambda md: md.with_changes(custom_metadata={"touched": b"1"}))
    writer.close()
    md = client.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, md.custom_metadata) == (CLOSED, 0, {"touched": b"1"}) and done


def test_client_close_leaves_no_thread_running(store, cluster):
    baseline = {thread.ident for thread in threading.enumerate()}
    config = ClientConfig(**{**FAST, "speculative_read_delay_s": 0.01})
    client = LedgerClient(store, config, transport=cluster.transport())
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for _ in range(50):
        writer.append(b"x")
    reader = client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert len(list(reader.read())) == 49  # the last entry's LAC is not on any bookie yet
    cluster.hold(op="add")
    stuck = writer.append_async(b"never")
    client.close()
    with pytest.raises(LedgerClosedError, match="client was closed"):
        stuck.result(10)
    left = [t.name for t in threading.enumerate() if t.ident not in baseline]
    assert left == [], f"threads left running: {left}"
    with pytest.raises(LedgerClosedError):
        client.create_ledger(3, 3, 2)
