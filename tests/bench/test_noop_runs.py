"""The floor's no-op servers answer as a bookie does (docs/protocol.md W9): in runs to a client that asks, per add
to one that does not, so the fan-out limit pays for answers what the cheapest form costs."""
from __future__ import annotations

import threading

import pytest

from bench.noop_bookies import start_noop_servers
from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_wire import AddEncoder
from pyspark_ledger.client.bookie_rpc import BookieClient
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def noop_port():
    servers = start_noop_servers(1)
    try:
        yield servers[0][1]
    finally:
        for process, _ in servers:
            process.kill()
            process.wait(10)


@pytest.mark.parametrize("runs", [True, False], ids=["asks-for-runs", "per-add"])
def test_W9_a_noop_server_answers_in_the_form_the_client_asked_for(noop_port, runs):
    seen: dict[str, list] = {"acks": [], "results": []}
    lock = threading.Lock()

    def on_results(_bookie, results):
        with lock:
            seen["results"] += [(r.ledger_id, r.entry_id, r.status) for r in results]

    def on_acks(_bookie, spans):
        with lock:
            seen["acks"] += [(ledger_id, e, pb.OK) for ledger_id, ids in spans for e in ids]
    listener = AddCallbacks(on_results, lambda *_: None, on_acks)
    client = BookieClient(f"127.0.0.1:{noop_port}", answer_runs=runs)
    try:
        encoder = AddEncoder(3, b"k" * 20)
        with client.add_stream() as stream:
            for start in range(0, 500, 100):
                stream.send(3, [(e, encoder.encode(e, b"x" * 64)) for e in range(start, start + 100)], listener)
            wait_until(lambda: len(seen["acks"]) + len(seen["results"]) == 500, 30, "every add to be answered")
    finally:
        client.close()
    expected = [(3, e, pb.OK) for e in range(500)]
    assert seen == ({"acks": expected, "results": []} if runs else {"acks": [], "results": expected})


def test_bench_servers_tune_malloc_as_a_bookie_does(monkeypatch):
    """The no-op and durable servers share ``serve``: their processes get a bookie's malloc thresholds first
    (``bookie_server.memory``), so no limit pays a map and an unmap per received add that a bookie is spared."""
    import bench.noop_bookies as noop

    calls: list[str] = []

    class Stop(Exception):
        pass

    def no_server(*_args, **_kwargs):
        calls.append("grpc.server")
        raise Stop
    monkeypatch.setattr(noop, "keep_freed_memory", lambda: calls.append("keep_freed_memory"))
    monkeypatch.setattr(noop.grpc, "server", no_server)
    with pytest.raises(Stop):
        noop.serve(noop.NoopBookie(), 0)
    assert calls == ["keep_freed_memory", "grpc.server"]
