"""Servers of the bookie's gRPC protocol that make every add durable before answering it, and do nothing else.

The durable fan-out (``bench/replication.py``'s paced rows) sends the client's AddStream to 3 of them: the least
any durable store must do over this transport and disk -- receive the add, write its bytes to a file, fdatasync,
answer -- with nothing a bookie adds (checks, entry log, index, fencing). Each serves adds on gRPC and, through the
bookie's own ``FramedListener``, on a framed add port (docs/protocol.md W11), the transport our adds take; the
paced limit sends to the framed port. So its latency bounds what any server over that transport that
acknowledges an add only once it is fsync'd can reach on this machine.

Made as cheap as a minimal server can be (an honest limit must not be handicapped):

* one file per server, **preallocated**: ``preallocate`` bytes of zeros written and fsync'd before the server
  reports ready, then overwritten in place with ``pwrite``, so an ``fdatasync`` changes no file size and
  allocates no block (beyond them the file grows, still correct);
* **the write as soon as the add arrives**: a reader thread per stream takes each AddBatch off the stream, writes
  its entries' bodies with one ``pwrite`` and queues their ids; the stream's handler thread is the sync thread: it
  takes everything queued, ``fdatasync``s once and answers all of it (a group commit), so adds arriving during a
  sync are in the page cache already and wait only for the next one. An id is queued only after its write
  returned, so every answered add was written before the ``fdatasync`` that preceded its answer began;
* **no hand-off when idle**, as a bookie's journal (docs/protocol.md B1): on a plaintext framed connection, a batch
  that finds nothing being synced or waiting is synced and answered by the reader thread itself, the answer sent
  at once if the socket takes it (the bookie's ``AnswerOutbox``, so the handler thread's sends and the reader's
  never mix);
* answers as a bookie sends them: runs of entry ids to a client that asks (docs/protocol.md W9), else one
  ``AddResult`` per add, one message per group commit.

``durable_servers(count, parent)`` starts ``count`` of them as processes (``python bench/durable_bookies.py
PORT FILE PREALLOCATE`` is one) with their files in a fresh directory under ``parent``, and removes the
processes and the directory afterwards. ``sync_figures(port)`` asks one for its group commits so far (their
count, adds per ``fdatasync``, its time): a bench-only server, it puts them as JSON in Info's ``version``.
"""
from __future__ import annotations

import contextlib
import json
import operator
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.noop_bookies import serve, start_servers, stop_servers  # noqa: E402
from bookie_server.answer_outbox import AnswerOutbox  # noqa: E402
from pyspark_ledger.wire.ack_runs import PerAddBuilder, RunBuilder, asks_for_runs  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2 as pb  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc  # noqa: E402

_LEDGER_ID, _ENTRY_ID, _BODY = (operator.attrgetter(name) for name in ("ledger_id", "entry_id", "body"))
_ZEROS = bytes(1 << 20)
DURABLE_METHOD = ("AddStream fan-out over the framed add port (docs/protocol.md W11, as ours) to 3 servers that make "
                  "each add durable before answering it (durable_bookies.py: bodies written to a preallocated file "
                  "per server, one fdatasync per group commit, nothing else), all 3 acks per entry")


class DurableBookie(pb_grpc.BookieServicer):
    """Appends each add's body to ``path`` and answers it once an ``fdatasync`` begun after the write returned
    (see the module docstring). ``sync`` is ``os.fdatasync`` (a test may watch it)."""

    def __init__(self, path: Path, preallocate: int = 0, sync=os.fdatasync) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        for _ in range(-(-preallocate // len(_ZEROS))):
            os.write(self._fd, _ZEROS)
        if preallocate:
            os.fsync(self._fd)
        self._sync = sync
        self._commits: list[tuple[float, int]] = []  # (fdatasync seconds, adds) per group commit
        self._offset = 0
        self._write_lock = threading.Lock()  # the streams share the file
        self._streams = {"grpc": 0, "framed": 0}  # add streams taken, by transport
        self.handler_wakes = 0  # times a stream's handler thread was woken (by its reader, or at the stream's end)

    def close(self) -> None:
        os.close(self._fd)

    def AddStream(self, request_iterator, context):
        self._streams["grpc" if isinstance(context, grpc.ServicerContext) else "framed"] += 1
        builder = RunBuilder() if asks_for_runs(context.invocation_metadata()) else PerAddBuilder()
        queued: list[tuple[list[int], list[int]]] = []  # written, waiting for a group commit
        durable: list[tuple[list[int], list[int]]] = []  # fsync'd, waiting to be answered (the outbox's queue)
        state = {"open": True, "syncing": False}
        ready = threading.Condition()
        sender = getattr(context, "answer_sender", None)  # a plaintext framed call: answers may go from any thread

        def build(items: list) -> list:
            for ledger_ids, entry_ids in items:
                builder.acked(ledger_ids, entry_ids)
            return list(builder.messages())

        def take_durable() -> list:
            taken = durable[:]
            durable.clear()
            return taken
        outbox = AnswerOutbox(sender, take_durable, build) if sender is not None else None

        def read() -> None:
            try:
                for batch in request_iterator:
                    adds = batch.adds
                    data = adds[0].body if len(adds) == 1 else b"".join(map(_BODY, adds))  # a large add: no copy
                    with self._write_lock:
                        offset = self._offset
                        self._offset += len(data)
                        os.pwrite(self._fd, data, offset)
                    ids = (list(map(_LEDGER_ID, adds)), list(map(_ENTRY_ID, adds)))
                    with ready:  # nothing being synced or waiting: this thread syncs and answers itself
                        lead = outbox is not None and not state["syncing"] and not queued
                        if lead:
                            state["syncing"] = True
                        else:
                            queued.append(ids)
                            ready.notify()
                    if lead:
                        self._commit([ids])
                        answered = outbox.offer(ids)
                        with ready:
                            if not answered:
                                durable.append(ids)
                            state["syncing"] = False
                            if queued or unsent():  # the handler has work: else it sleeps on (a bookie's way)
                                ready.notify()
            except Exception:  # noqa: BLE001 -- the stream was cancelled or broke: nothing more to answer
                pass
            finally:
                with ready:
                    state["open"] = False
                    ready.notify()

        def unsent() -> bool:
            return bool(durable) or (outbox is not None and outbox.holding)
        threading.Thread(target=read, name="durable-reader", daemon=True).start()
        while True:
            with ready:  # (the reader notifies when it queued a group, or left answers or bytes of one unsent)
                while state["open"] and not (queued and not state["syncing"]) and not unsent():
                    ready.wait()
                    self.handler_wakes += 1
                if not state["open"] and not queued and not unsent():
                    return
                taken = [] if state["syncing"] else queued[:]
                if taken:
                    queued.clear()
                    state["syncing"] = True
            if taken:
                self._commit(taken)  # every id taken was written before this call
                with ready:
                    durable.extend(taken)
                    state["syncing"] = False
            if outbox is None:
                yield from build(take_durable())
            else:
                outbox.send()  # blocking: what the socket left, then everything fsync'd, in order

    def _commit(self, taken: list[tuple[list[int], list[int]]]) -> None:
        started = time.perf_counter()
        self._sync(self._fd)
        self._commits.append((time.perf_counter() - started, sum(len(ids) for _, ids in taken)))

    def WriteLac(self, request, context):
        return pb.WriteLacResponse(status=pb.OK, last_add_confirmed=request.last_add_confirmed)

    def Info(self, request, context):
        return pb.BookieInfoResponse(status=pb.OK, bookie_id="durable", version=json.dumps(self.figures()))

    def figures(self) -> dict:
        """The group commits so far: how many, adds per ``fdatasync``, and its time (p50, p99, mean, max); the add
    streams taken over gRPC and over the framed port; how often their handler threads were woken."""
        commits = list(self._commits)
        streams = {f"{transport}_streams": count for transport, count in self._streams.items()}
        streams["handler_wakes"] = self.handler_wakes
        if not commits:
            return {"commits": 0, **streams}
        seconds = sorted(duration for duration, _ in commits)
        at = lambda fraction: round(seconds[min(len(seconds) - 1, int(fraction * len(seconds)))] * 1e3, 3)  # noqa: E731
        return {"commits": len(commits), "adds_per_fdatasync": round(sum(n for _, n in commits) / len(commits), 2),
                "fdatasync_p50_ms": at(0.5), "fdatasync_p99_ms": at(0.99),
                "fdatasync_mean_ms": round(sum(seconds) / len(seconds) * 1e3, 3),
                "fdatasync_max_ms": round(seconds[-1] * 1e3, 3), **streams}


def sync_figures(port: int) -> dict:
    """The group-commit figures of the durable server on 127.0.0.1:``port`` (``DurableBookie.figures``)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return json.loads(pb_grpc.BookieStub(channel).Info(pb.BookieInfoRequest(), timeout=10).version)


@contextlib.contextmanager
def durable_servers(count: int, parent: Path, preallocate: int = 0):
    """``count`` durable servers (a list of (process, port)), their files in a fresh directory under ``parent``
    (``preallocate`` bytes each); the processes are killed and the directory removed on exit."""
    directory = Path(tempfile.mkdtemp(prefix="durable-fanout-", dir=parent))
    try:
        servers = start_servers(count, lambda port: [sys.executable, __file__, str(port),
                                                     str(directory / f"adds-{port}"), str(preallocate)])
        try:
            yield servers
        finally:
            stop_servers(servers)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def lowest_p99(runs: list[tuple[str, dict]], label: str) -> dict:
    """Of labelled runs of one paced limit, the one with the lowest p99 to the second ack (the disk's stalls and the
    machine's bursts come and go: a limit is what its best run reached), with every run's p50/p99 under ``label``."""
    key = "p99_ms_to_second_ack"
    kept = min((run for _, run in runs), key=lambda run: run[key])
    figures = [{label: name, "p50_ms_to_second_ack": run["p50_ms_to_second_ack"], key: run[key]} for name, run in runs]
    return {**kept, "runs": figures, "kept": f"the run with the lowest p99 of the {len(runs)}"}


if __name__ == "__main__":
    serve(DurableBookie(Path(sys.argv[2]), int(sys.argv[3])), int(sys.argv[1]), framed=True)
