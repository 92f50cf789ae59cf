"""The peer beside our replication benchmark: NATS JetStream, 3 nodes, a stream of 3 replicas on files.

Usage: ``python bench/nats_peer.py [--seconds 6] [--out FILE]``.

Starts 3 ``nats-server`` processes on 127.0.0.1 (``nats_cluster.py``: clustered over loopback routes, each
with its own JetStream store in a temporary directory), waits for the JetStream meta leader, and for each
run creates a new stream (3 replicas, file storage, messages up to 1 MiB + 64 KiB), connects ``nats-py`` to
the node that leads that stream (the best case for the peer: no hop through a follower) and publishes with
acknowledgements, many in flight: the workloads of ``bench/replication.py`` with the same payload sizes
and windows -- 1 KiB messages (2,000 in flight), 1 MiB messages (8 in flight), and 1 KiB messages paced at
1,000/s. Reported per run as ``replication.py`` reports its runs: messages/s, MB/s, p50/p99 latency from
the publish call to its acknowledgement, and the CPU microseconds per message of this process and each
server. The stream is deleted after its run.

What an acknowledgement means differs (``ACK_SEMANTICS`` below, also in the JSON): this JetStream
version acknowledges once a majority of the stream's replicas has written the message to its files
through the page cache; it fsyncs later, on a timer. Our bookies fsync their journal before they
acknowledge.

Without ``nats-server`` (or without the ``nats-py`` package) the JSON says ``skipped`` and why, and the
command exits 0. Prints one JSON document (and writes it with ``--out``).
"""
from __future__ import annotations

import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

from cpu_usage import CpuMeter  # noqa: E402
from nats_cluster import MISSING, NatsCluster, nats_server_binary, nats_server_version  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
SIZES = {"1KiB": (KiB, 2_000), "1MiB": (MiB, 8)}  # as bench/replication.py: payload bytes, in flight
PACED = ("paced_1KiB_1000_per_s", KiB, 1_000, 1000.0)  # name, payload bytes, in flight, messages/s
MAX_MSG_SIZE = MiB + 64 * KiB
MISSING_CLIENT = "nats-py not installed (pip install nats-py, or pip install -e '.[bench]')"
ACK_SEMANTICS = (
    "nats-server 2.9.x acknowledges a publish to a replicated stream once a majority of its replicas has "
    "written the message to its raft log file, without fsync: writes go to the page cache; a stream's "
    "message blocks are fsync'd every 2 minutes and the raft log every 5 minutes (server/stream.go and "
    "server/jetstream_cluster.go of v2.9.10; no sync_interval option before 2.10). Our bookies fsync "
    "their journal before they acknowledge an add.")


def percentile_ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000.0 if ordered else float("nan")


async def wait_for_jetstream(url: str, timeout: float = 60.0):
    """A connection to ``url`` once JetStream answers (the meta leader is elected), and its context."""
    import nats
    from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
    from nats.js.errors import APIError, ServiceUnavailableError

    connection = await nats.connect(url, pending_size=64 * MiB, max_reconnect_attempts=0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            context = connection.jetstream(timeout=5)
            await context.account_info()
            return connection, context
        except (APIError, ServiceUnavailableError, NoRespondersError, NatsTimeout) as error:
            if time.monotonic() > deadline:
                await connection.close()
                raise TimeoutError(f"JetStream at {url} had no meta leader within {timeout} s: {error!r}")
            await asyncio.sleep(0.25)


async def create_stream(context, name: str, subject: str, timeout: float = 60.0) -> str:
    """Create a 3-replica file stream (retrying while the cluster forms); return its leader's name."""
    from nats.js import api
    from nats.js.errors import APIError

    config = api.StreamConfig(name=name, subjects=[subject], storage=api.StorageType.FILE, num_replicas=3,
                              max_msg_size=MAX_MSG_SIZE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await context.add_stream(config)
            info = await context.stream_info(name)
            if info.cluster is not None and info.cluster.leader:
                return info.cluster.leader
        except (APIError, asyncio.TimeoutError) as error:
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream {name} not created within {timeout} s: {error!r}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"stream {name} has no leader after {timeout} s")
        await asyncio.sleep(0.25)


async def publish_run(url: str, subject: str, size: int, seconds: float, inflight: int,
                      rate: float | None) -> dict:
    """Publish ``size``-byte messages to ``subject`` for ``seconds``, at most ``inflight`` unacknowledged
    (paced at ``rate``/s if given); latency from the publish call to the acknowledgement."""
    import nats

    connection = await nats.connect(url, pending_size=64 * MiB, max_reconnect_attempts=0)
    try:
        context = connection.jetstream(timeout=30, publish_async_max_pending=inflight)
        data = os.urandom(size)
        window = asyncio.Semaphore(inflight)
        latencies: list[float] = []
        errors: list[BaseException] = []

        def acknowledged(sent: float, future: asyncio.Future) -> None:
            latencies.append(time.perf_counter() - sent)
            if future.cancelled():
                errors.append(asyncio.CancelledError())
            elif future.exception() is not None:
                errors.append(future.exception())
            window.release()
        started = time.perf_counter()
        count = 0
        while time.perf_counter() - started < seconds:
            if rate is not None:
                delay = started + count / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            await window.acquire()
            sent = time.perf_counter()
            future = await context.publish_async(subject, data)
            future.add_done_callback(lambda done, sent=sent: acknowledged(sent, done))
            count += 1
        for _ in range(inflight):
            await window.acquire()
        elapsed = time.perf_counter() - started
    finally:
        await connection.close()
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} publishes failed, first: {errors[0]!r}")
    return {"entries": count, "seconds": round(elapsed, 3), "entries_per_s": round(count / elapsed),
            "mb_per_s": round(count * size / elapsed / 1e6, 1), "p50_ms": round(percentile_ms(latencies, 0.5), 3),
            "p99_ms": round(percentile_ms(latencies, 0.99), 3)}


async def one_run(cluster: NatsCluster, control, index: int, size: int, seconds: float, inflight: int,
                  rate: float | None) -> dict:
    """A new stream, one measured publish run against its leader, then the stream deleted."""
    name, subject = f"BENCH{index}", f"bench.{index}"
    leader = await create_stream(control, name, subject)
    try:
        meter = CpuMeter({"client": os.getpid(), **cluster.pids}).start()
        result = await publish_run(cluster.url_of(leader), subject, size, seconds, inflight, rate)
        result.update(meter.per_item(result["entries"]))
        result["stream_leader"] = leader
    finally:
        await control.delete_stream(name)
    return result


async def measure(cluster: NatsCluster, seconds: float) -> dict:
    connection, control = await wait_for_jetstream(cluster.urls[0])
    try:
        runs: dict[str, dict] = {}
        for index, (name, (size, inflight)) in enumerate(SIZES.items()):
            runs[name] = await one_run(cluster, control, index, size, seconds, inflight, None)
        name, size, inflight, rate = PACED
        runs[name] = await one_run(cluster, control, len(SIZES), size, seconds, inflight, rate)
        return runs
    finally:
        await connection.close()


def skipped(reason: str) -> dict:
    return {"benchmark": "nats_jetstream", "skipped": reason}


def run(seconds: float) -> dict:
    binary = nats_server_binary()
    if binary is None:
        return skipped(MISSING)
    try:
        import nats  # noqa: F401
    except ImportError:
        return skipped(MISSING_CLIENT)
    from importlib.metadata import version

    result: dict = {"benchmark": "nats_jetstream", "cpus": os.cpu_count(), "python": platform.python_version(),
                    "nats_server_version": nats_server_version(binary), "nats_py_version": version("nats-py"),
                    "cluster": "3 nats-server processes on 127.0.0.1, routes on loopback",
                    "stream": {"replicas": 3, "storage": "file", "max_msg_size": MAX_MSG_SIZE},
                    "client": "nats-py publish_async to the stream leader's node, bounded window",
                    "ack_semantics": ACK_SEMANTICS, "seconds_per_run": seconds,
                    "note": "servers and client share this machine's cores",
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="bench-nats-") as tmp:
        with NatsCluster(Path(tmp), 3, binary) as cluster:
            result["runs"] = asyncio.run(measure(cluster, seconds))
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 6.0, help="length of each measured run")
    args = parser.parse_args(argv)
    return emit(run(args.seconds), args.out)


if __name__ == "__main__":
    sys.exit(main())
