"""Explicit LAC over fake bookies: tailing readers see the last entry of a burst; the rule itself."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from pyspark_ledger.client.explicit_lac import ExplicitLac, LacFlusher
from pyspark_ledger.entry import EntryCodec
from tests.client.conftest import PASSWORD, wait_until


def write_lacs(cluster) -> list[tuple]:
    return [request for request in cluster.requests if request[0] == "write_lac"]


def bookie_lac(cluster, bookie: str, ledger_id: int) -> int:
    return cluster.network.call(lambda: cluster[bookie].last_add_confirmed(ledger_id))


def test_a_tailing_reader_sees_the_last_entry_of_a_burst_with_no_later_entry(make_client, cluster):
    writer = make_client(explicit_lac_interval_s=0.05).create_ledger(3, 3, 2, password=PASSWORD)
    burst = [writer.append_async(b"entry-%d" % index) for index in range(10)]
    assert [future.result(10) for future in burst] == list(range(10))
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert tail.wait_for_entry(9, timeout=10) is True
    assert [entry.data for entry in tail.read(9, 9)] == [b"entry-9"]
    assert not cluster.holders(writer.ledger_id, 10), "a later entry was written"
    assert {request[1] for request in write_lacs(cluster)} <= set(writer.metadata.current_fragment.bookies)
    assert len(write_lacs(cluster)) < 10 * 3, "the LAC was sent per entry"


def test_with_explicit_lac_off_the_last_entry_waits_for_the_next_one(make_client, cluster):
    writer = make_client(explicit_lac_interval_s=0).create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(3):
        writer.append(b"entry-%d" % index)
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert tail.wait_for_entry(2, timeout=0.5) is False
    writer.append(b"entry-3")  # carries LAC 2
    assert tail.wait_for_entry(2, timeout=10) is True
    assert write_lacs(cluster) == []


def test_the_explicit_lac_goes_to_the_ensemble_after_a_change(make_client, cluster):
    writer = make_client(explicit_lac_interval_s=0.05).create_ledger(3, 3, 3, password=PASSWORD)
    down = writer.metadata.current_fragment.bookies[0]
    cluster.set_down(down)
    assert writer.append(b"a") == 0  # Qa = 3: confirmed only once the replacement stored it
    ensemble = writer.metadata.current_fragment.bookies
    assert down not in ensemble
    for bookie in ensemble:
        wait_until(lambda bookie=bookie: bookie_lac(cluster, bookie, writer.ledger_id) == 0, 10,
                   f"bookie {bookie} to learn LAC 0")
    assert down not in {request[1] for request in write_lacs(cluster)}
    writer.close()


def test_fake_bookies_answer_write_lac_like_real_ones(cluster):
    transport = cluster.transport()
    body = EntryCodec().encode(9, 0, -1, 1, b"x")
    try:
        assert transport.write_lac("bookie-0", 9, b"key", 0).result(5).status.name == "NO_SUCH_LEDGER"
        assert transport.add("bookie-0", 9, 0, b"key", body).result(5).ok
        assert transport.write_lac("bookie-0", 9, b"wrong", 0).result(5).status.name == "UNAUTHORIZED"
        raised = transport.write_lac("bookie-0", 9, b"key", 3).result(5)
        assert raised.ok and raised.last_add_confirmed == 3
        assert transport.write_lac("bookie-0", 9, b"key", 1).result(5).last_add_confirmed == 3
        assert transport.read("bookie-0", 9, 0, 0, fence=True, master_key=b"key").result(5).fenced
        fenced = transport.write_lac("bookie-0", 9, b"key", 4).result(5)
        assert fenced.ok and fenced.fenced and fenced.last_add_confirmed == 4
    finally:
        transport.close()


def test_rule_sends_once_the_writer_is_quiet_and_only_what_entries_did_not_carry():
    rule = ExplicitLac(0.25)
    rule.add_sent(-1, 10.0)  # entry 0 carries LAC -1
    assert rule.arm(-1, 10.0) is None  # nothing new to tell
    assert rule.arm(0, 10.0) == pytest.approx(0.25)
    assert rule.arm(0, 10.0) is None  # one check at a time
    rule.add_sent(0, 10.125)  # entry 1 carries LAC 0
    assert rule.check(0, 10.25) == (None, None)  # entry 1 told the bookies already
    assert rule.arm(1, 10.25) == pytest.approx(0.125)
    assert rule.check(1, 10.25) == (None, pytest.approx(0.125))  # an entry went out 125 ms ago: later
    assert rule.check(1, 10.5) == (1, None)
    assert rule.arm(1, 10.5) is None  # told
    assert rule.arm(2, 10.5) == 0.0  # quiet for long enough already


def test_rule_with_interval_zero_never_sends():
    rule = ExplicitLac(0)
    rule.add_sent(-1, 1.0)
    assert rule.arm(5, 100.0) is None
    assert rule.check(5, 100.0) == (None, None)


def test_one_bookie_refusing_the_call_at_once_does_not_keep_the_lac_from_the_others():
    class Transport:
        def __init__(self):
            self.sent = []

        def write_lac(self, bookie, ledger_id, key, lac, timeout):
            if bookie == "b1":
                raise RuntimeError("channel closed")  # e.g. a bookie whose channel was just torn down
            self.sent.append((bookie, lac))
            done: Future = Future()
            done.set_result(SimpleNamespace(ok=True))
            return done

    ctx = SimpleNamespace(transport=Transport(), config=SimpleNamespace(explicit_lac_interval_s=0.1,
                                                                          read_timeout_s=1.0))
    flusher = LacFlusher(ctx, 7, b"k" * 20, post=lambda event: event(), snapshot=lambda: None)
    flusher._send(4, ("b1", "b2", "b3"))
    assert ctx.transport.sent == [("b2", 4), ("b3", 4)]
