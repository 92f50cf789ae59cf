"""The NATS JetStream peer of the benchmarks: a real 3-node cluster of Debian's nats-server on loopback,
a 3-replica file stream, acknowledged publishes, every server stopped; and the skip when it is missing."""
from __future__ import annotations

import asyncio
import socket

import pytest

from bench import nats_cluster, nats_peer

BINARY = nats_cluster.nats_server_binary()
try:
    import nats  # noqa: F401
    CLIENT = True
except ImportError:
    CLIENT = False

needs_nats = pytest.mark.skipif(BINARY is None or not CLIENT,
                                reason=nats_cluster.MISSING if BINARY is None else nats_peer.MISSING_CLIENT)


def test_without_nats_server_the_benchmark_reports_skipped(monkeypatch):
    monkeypatch.setattr(nats_peer, "nats_server_binary", lambda: None)
    assert nats_peer.run(0.1) == {"benchmark": "nats_jetstream",
                                  "skipped": "nats-server not installed (apt-get install nats-server)"}


@needs_nats
def test_a_cluster_of_three_takes_acknowledged_publishes_then_every_server_stops(tmp_path):
    async def publish(cluster):
        connection, control = await nats_peer.wait_for_jetstream(cluster.urls[0], timeout=30)
        try:
            leader = await nats_peer.create_stream(control, "SMOKE", "smoke.1", timeout=30)
            kib = await nats_peer.publish_run(cluster.url_of(leader), "smoke.1", 1024, 0.3, 50, None)
            mib = await nats_peer.publish_run(cluster.url_of(leader), "smoke.1", 1024 * 1024, 0.2, 2, None)
            info = await control.stream_info("SMOKE")
            return leader, kib, mib, info
        finally:
            await connection.close()

    cluster = nats_cluster.NatsCluster(tmp_path, 3, BINARY)
    with cluster:
        processes = list(cluster.processes)
        leader, kib, mib, info = asyncio.run(publish(cluster))
    assert leader in cluster.names
    assert kib["entries"] > 0 and kib["p50_ms"] > 0 and mib["entries"] > 0
    assert info.config.num_replicas == 3 and info.config.storage == "file"
    assert info.state.messages == kib["entries"] + mib["entries"]  # every acknowledged message is in the stream
    assert len(info.cluster.replicas) == 2  # the leader and two followers
    assert all(process.poll() is not None for process in processes) and cluster.processes == []


@needs_nats
def test_a_server_that_cannot_start_is_reported_and_the_others_stopped(tmp_path, monkeypatch):
    cluster = nats_cluster.NatsCluster(tmp_path, 3, BINARY)
    started: list = []
    stop = cluster.stop

    def stop_and_remember() -> None:
        started.extend(cluster.processes)
        stop()
    monkeypatch.setattr(cluster, "stop", stop_and_remember)
    with socket.socket() as taken:  # the third node's client port is taken: that server exits at once
        taken.bind(("127.0.0.1", cluster.ports[2]))
        taken.listen()
        try:
            with pytest.raises(RuntimeError, match="nats-server n2 exited"):
                cluster.start(timeout=20)
        finally:
            stop()
    assert len(started) == 3 and all(process.poll() is not None for process in started)
    assert cluster.processes == []
