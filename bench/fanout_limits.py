"""The transport's limits of the replication benchmark (``replication.py``), each measured in the same run.

* ``fsync_limit``: 3 threads appending the entries to their own files, one fsync per write of up to 1 MiB (an
  ideal group-committing journal);
* ``grpc_fanout_limit``: encoded entries through the client's own transport to 3 servers of the bookie's proto
  (``noop_bookies.py``: they store nothing; ``durable_bookies.py``: they make each add durable first), each
  entry done once all 3 acknowledged; paced, with the latency to the second ack;
* ``paced_fanout_limit``: the paced fan-out to the no-op servers both ways a stream can send small adds, the run
  with the lower p99 kept;
* ``durable_fanout_limit``: the paced fan-out to 3 durable servers whose files are in a fresh directory
  (``durable_fanout_runs``: once each way), over their framed add ports (docs/protocol.md W11), the transport
  our adds take (from the run after 3561662 on; over gRPC before).

Also the pacing and percentile helpers the benchmark's drivers share.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_usage import CpuMeter  # noqa: E402
from durable_bookies import DURABLE_METHOD, durable_servers, lowest_p99, sync_figures  # noqa: E402
from noop_bookies import noop_registrations  # noqa: E402
from pyspark_ledger.client.add_listeners import AddCallbacks  # noqa: E402
from pyspark_ledger.client.add_wire import AddEncoder  # noqa: E402
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT, MAX_BATCHES_IN_FLIGHT  # noqa: E402
from pyspark_ledger.client.transport import GrpcTransport  # noqa: E402
from pyspark_ledger.entry import EntryCodec, master_key  # noqa: E402
from pyspark_ledger.metadata import open_metadata_store  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2 as pb  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
PASSWORD = b"bench"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000.0 if ordered else float("nan")


def paced(started: float, seconds: float, rate: float | None):
    """0, 1, 2, ... until ``seconds`` after ``started``; with ``rate``, number n not before n / rate s."""
    count = 0
    while time.perf_counter() - started < seconds:
        if rate is not None:
            delay = started + count / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        yield count
        count += 1


class Credits:
    """Room for ``total`` adds in flight, given back by the answers and taken by the sender in bulk: one lock per
    answer batch and per time the sender finds no room, where a ``threading.BoundedSemaphore`` takes a lock per
    add on each side (from the run after 7be262b on; the writer our runs drive bounds its adds in flight itself)."""

    def __init__(self, total: int) -> None:
        self._total = self._free = total
        self._changed = threading.Condition()

    def take(self) -> int:
        """All the room there is, at least 1 (waits for it)."""
        with self._changed:
            while not self._free:
                self._changed.wait()
            free, self._free = self._free, 0
            return free

    def give(self, count: int) -> None:
        if count:
            with self._changed:
                self._free += count
                self._changed.notify()

    def wait_all(self, held: int) -> None:
        """Until every add is answered; ``held``: room taken and not used."""
        with self._changed:
            self._changed.wait_for(lambda: self._free + held >= self._total)


def fsync_limit(directory: Path, size: int, entries: int) -> dict:
    """3 threads append ``entries`` x ``size`` bytes each to a file, one fsync per write of <= 1 MiB."""
    per_write = max(1, MiB // size)
    chunk = os.urandom(size) * per_write

    def one(index: int) -> None:
        path = directory / f"fsync-limit-{index}"
        with open(path, "wb", buffering=0) as handle:
            left = entries
            while left > 0:
                count = min(per_write, left)
                handle.write(chunk[:count * size])
                os.fsync(handle.fileno())
                left -= count
        path.unlink()
    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"entries_per_s": round(entries / elapsed), "mb_per_s": round(entries * size / elapsed / 1e6, 1),
            "method": f"3 files, one fsync per {per_write} entries"}


UNHELD = MAX_BATCHES_IN_FLIGHT  # no batch of small adds waits for an answer


def grpc_fanout_limit(ports: list[int], directory: Path, size: int, seconds: float, inflight: int,
                      servers: dict[str, int] | None = None, rate: float | None = None,
                      method: str = "AddStream fan-out to 3 no-op servers, all 3 acks per entry",
                      batches_in_flight: int = UNHELD, add_ports: dict[int, int] | None = None) -> dict:
    """Encoded entries to 3 no-op servers over AddStream; an entry counts once all 3 acknowledged.

    Through the client's own transport (``GrpcTransport.send_adds_to``, as the writer sends), without the
    writer: each entry is encoded once and its bytes go to the 3 streams, answered per batch. With
    ``servers`` (name -> pid) also the CPU per entry of this process and of each server; with ``rate``,
    paced at that many entries/s, with the p50/p99 latency to the second ack (an ack quorum of 2).
    ``batches_in_flight``: the streams' window (docs/protocol.md W10). With ``add_ports`` (gRPC port -> framed
    add port), to those framed add ports (docs/protocol.md W11).
    """
    with noop_registrations(ports, directory, f"fanout-{size}-{rate}-{batches_in_flight}-{ports[0]}",
                            add_ports) as uri:
        return fanout_run(uri, 1, size, seconds, inflight, servers, rate, method, batches_in_flight,
                          framed=bool(add_ports))


# How the paced bare fan-out may send small adds: each as its own message as soon as the stream is free (the
# transport's speed when every add is answered before the next is due), or with ours' window (docs/protocol.md W10:
# by default 2 AddBatches in flight on a framed stream, 1 on gRPC; what keeps a server that fell behind from
# working off one-add messages slower than they come). Either can have the lower tail in a given hour; the limit is
# the better of the two.
PACED_FANOUT_MODES = (("each add at once", UNHELD),
                      ("ours' window of AddBatches in flight", DEFAULT_BATCHES_IN_FLIGHT))


def paced_fanout_limit(ports: list[int], directory: Path, seconds: float, servers: dict[str, int] | None = None,
                       rate: float = 1000.0) -> dict:
    """The paced 1 KiB fan-out to the no-op servers once per ``PACED_FANOUT_MODES``; the run with the lowest p99
    (its figures, CPU included), with each mode's p50/p99 under ``runs``."""
    runs = [(mode, grpc_fanout_limit(ports, directory, KiB, seconds, 1_000, servers, rate, batches_in_flight=window))
            for mode, window in PACED_FANOUT_MODES]
    return {**lowest_p99(runs, "mode"), "method": "AddStream fan-out to 3 no-op servers, paced, the better of "
            + " and ".join(mode for mode, _ in PACED_FANOUT_MODES)}


def fanout_run(uri: str, ledger_id: int, size: int, seconds: float, inflight: int,
               servers: dict[str, int] | None = None, rate: float | None = None,
               method: str = "AddStream fan-out to 3 no-op servers, all 3 acks per entry",
               batches_in_flight: int = UNHELD, framed: bool = False) -> dict:
    """The fan-out of ``grpc_fanout_limit`` to every bookie registered in the metadata store at ``uri``, as adds
    of ``ledger_id`` from entry 0 on (keyed with the benchmarks' password): real bookies take them once a
    writer created that ledger."""
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    codec, encoder, data = EntryCodec(), AddEncoder(ledger_id, master_key(PASSWORD)), os.urandom(size)
    window = Credits(inflight)
    acks: dict[int, int] = {}
    lock = threading.Lock()

    def count_acks(entry_ids) -> None:
        done, now = 0, time.perf_counter()
        with lock:
            for entry_id in entry_ids:
                count = acks.pop(entry_id) - 1
                if count == 1:
                    latencies.append(now - sent_at[entry_id])
                if count:
                    acks[entry_id] = count
                else:
                    del sent_at[entry_id]
                    done += 1
        window.give(done)

    failures: list[str] = []

    def answered(bookie: str, results: list) -> None:  # one AddResult per add
        refused = [result for result in results if result.status != pb.OK]
        if refused:  # a real bookie may refuse: that add did not succeed, and the run must say so
            failures.append(f"bookie {bookie} refused entry {refused[0].entry_id}: status {refused[0].status}")
        count_acks([result.entry_id for result in results])

    def acked(_bookie: str, spans: list) -> None:  # runs of OK answers (docs/protocol.md W9), as a bookie sends them
        count_acks(entry_id for _ledger_id, entry_ids in spans for entry_id in entry_ids)

    def failed(bookie: str, keys: list, error) -> None:  # the stream ended: its unanswered adds count as answered
        failures.append(f"bookie {bookie}: {error}")
        count_acks([entry_id for _ledger_id, entry_id in keys])
    listener = AddCallbacks(answered, failed, acked)
    with open_metadata_store(uri) as store:
        # by default every add its own message, written as soon as the stream is free: the transport's own speed,
        # as the limits were measured before an add stream held small adds back (docs/protocol.md W10)
        transport = GrpcTransport(store, max_batches_in_flight=batches_in_flight, framed_adds=framed)
        bookies = transport.bookies()
        meter = CpuMeter({"client": os.getpid(), **(servers or {})}).start()
        started = time.perf_counter()
        count = room = 0
        try:
            for count in paced(started, seconds, rate):
                if not room:
                    room = window.take()
                room -= 1
                frame = encoder.encode_pieces(  # as the writer encodes: a large payload is not copied (LargeAdd)
                    count, codec.encode_head(ledger_id, count, count - 1, count * size, data), data)
                with lock:
                    acks[count] = len(bookies)
                    sent_at[count] = time.perf_counter()
                refused = transport.send_adds_to(bookies, ledger_id, ((count, frame),), listener)
                if refused:
                    raise RuntimeError(f"fan-out refused: {refused}")
                count += 1  # after the loop: how many were sent
            window.wait_all(room)
            elapsed = time.perf_counter() - started
            used = meter.per_item(count)
        finally:
            transport.close()
    if failures:
        raise RuntimeError(f"{len(failures)} fan-out answer(s) or stream(s) failed, first: {failures[0]}")
    return {"entries_per_s": round(count / elapsed), "mb_per_s": round(count * size / elapsed / 1e6, 1),
            "method": method, "p50_ms_to_second_ack": round(percentile(latencies, 0.5), 3),
            "p99_ms_to_second_ack": round(percentile(latencies, 0.99), 3), **used}


def durable_file_room(seconds: float, rate: float) -> int:
    """Bytes to preallocate per durable server for a paced run: its bodies (1 KiB and framing), and then some, so
    that no file grows during the run."""
    return int(rate * seconds * 1_100 * 1.25) + MiB


def durable_fanout_limit(parent: Path, seconds: float, batches_in_flight: int = UNHELD) -> dict:
    """The paced fan-out (1,000 x 1 KiB/s) to 3 durable servers (``durable_bookies.py``) whose files are in a fresh
    directory under ``parent``, removed afterwards; with the CPU per entry of this process and of each server.
    ``batches_in_flight``: the streams' window."""
    with durable_servers(3, parent, durable_file_room(seconds, 1_000.0)) as servers:
        pids = {f"durable-{index}": process.pid for index, (process, _) in enumerate(servers)}
        result = grpc_fanout_limit([port for _, port in servers], parent, KiB, seconds, 1_000, pids, 1000.0,
                                   DURABLE_METHOD, batches_in_flight,
                                   add_ports={port: process.add_port for process, port in servers})
        commits = {f"durable-{index}": sync_figures(port) for index, (_, port) in enumerate(servers)}
    if any(figures.get("grpc_streams") or not figures.get("framed_streams") for figures in commits.values()):
        raise RuntimeError(f"the durable fan-out did not take the servers' framed add ports only: {commits}")
    return {**result, "files_in": str(parent), "group_commits": commits}


def durable_fanout_runs(parent: Path, seconds: float, when: str) -> list[tuple[str, dict]]:
    """``durable_fanout_limit`` once per ``PACED_FANOUT_MODES``, each labelled "``when``, <mode>" (for
    ``lowest_p99``)."""
    return [(f"{when}, {mode}", durable_fanout_limit(parent, seconds, window)) for mode, window in PACED_FANOUT_MODES]
