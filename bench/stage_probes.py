"""Probes for ``paced_stages.py``: CLOCK_MONOTONIC stamps of each add's stages, patched in from outside.

Nothing here is imported by the product: ``install_bookie(path)`` runs in a bookie only through a
``sitecustomize`` that ``paced_stages.py`` puts on the bookies' PYTHONPATH, and ``install_client()`` in the
benchmark's own process. ``time.monotonic()`` reads CLOCK_MONOTONIC, the same clock in every process of
the machine, so stamps of the client and of the bookies can be subtracted.

Bookie stamps (``records`` kinds): ``recv`` the stream's reader took an AddBatch (ids), ``store`` the
storage add of a batch (in, journal submitted, durable: the storage future's first callback), ``answer`` the
handler thread handed an AddResultBatch to gRPC (ids) and got control back (gRPC sent it), ``commit`` a
journal group commit (start, fdatasync start and end, records, oldest queued, bytes the file grew by
beyond the records: preallocated zeros that its fdatasync wrote), ``checkpoint`` and ``entrylog_sync``
(start, end), ``gc`` a collection (generation, start, end). Client stamps: ``take`` a stream's writer took
queued adds for one gRPC write (bookie, ids), ``deliver`` an AddResultBatch's results or acked runs reached the
stream's reader (bookie, ids), ``gc``.
"""
from __future__ import annotations

import collections
import gc
import json
import os
import threading
import time

records: list[tuple] = []
_now = time.monotonic


def _watch_gc() -> None:
    started: list[float] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(_now())
        elif started:
            records.append(("gc", info.get("generation"), started.pop(), _now()))
    gc.callbacks.append(callback)


def _dump_when_asked(path: str) -> None:
    """Once ``<prefix>.dump`` exists (``path`` is ``<prefix>.<pid>.json``), write ``records`` to ``path`` (JSON,
    replaced atomically) and stop; records made before ``<prefix>.reset`` appeared are dropped. Polls for the
    files 5 times a second, and dumps once: dumping while adds run would hold the GIL for the whole JSON
    encoding and delay the bookie's own threads."""
    prefix = path.rsplit(".", 2)[0]

    def run() -> None:
        reset = False
        while not os.path.exists(f"{prefix}.dump"):
            if not reset and os.path.exists(f"{prefix}.reset"):
                records.clear()
                reset = True
            time.sleep(0.2)
        temporary = f"{path}.tmp"
        with open(temporary, "w") as handle:
            json.dump(list(records), handle)
        os.replace(temporary, path)
    threading.Thread(target=run, name="stage-probe-dump", daemon=True).start()


def install_bookie(path: str, gc_only: bool = False) -> None:
    """The probes in a bookie, dumped to ``path``; with ``gc_only`` only the GC pauses (the other probes keep
    records of every add, which the collector then walks: they lengthen its pauses)."""
    if gc_only:
        _watch_gc()
        _dump_when_asked(path)
        return
    from bookie_server import add_stream, checkpoint, entry_log, journal, storage

    def ids(adds) -> list:
        return [(add.ledger_id, add.entry_id) for add in adds]

    take_batch = add_stream.AddStreamSession._take_batch

    def probed_take_batch(self, batch):
        records.append(("recv", _now(), ids(batch.adds)))
        return take_batch(self, batch)
    add_stream.AddStreamSession._take_batch = probed_take_batch

    add_entries_then = storage.BookieStorage.add_entries_then

    def probed_add_entries_then(self, adds, on_done):
        started, submitted = _now(), []
        keys = [(add[0], add[1]) for add in adds]

        def done(statuses):
            records.append(("store", started, submitted[0] if submitted else _now(), _now(), keys))
            on_done(statuses)
        add_entries_then(self, adds, done)
        submitted.append(_now())
    storage.BookieStorage.add_entries_then = probed_add_entries_then

    answers = add_stream.AddStreamSession._answers

    def probed_answers(self, items):  # the answers' messages, built by whichever thread sends them (answer_outbox)
        handed = _now()
        messages = answers(self, items)
        keys = [(op[0], op[1]) for item in items if item is not add_stream._WAKE and item[0] == add_stream._STORED
                for op in item[1]]
        records.append(("answer", handed, _now(), keys))
        return messages
    add_stream.AddStreamSession._answers = probed_answers

    class TimedOs:
        """``os`` for the journal module, with ``fdatasync`` stamped."""

        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def fdatasync(fd: int) -> None:
            started = _now()
            os.fdatasync(fd)
            _fsyncs.append((started, _now()))
    _fsyncs: list = []
    journal.os = TimedOs()
    commit = journal.Journal._commit

    def probed_commit(self, batch):
        started = _now()
        _fsyncs.clear()
        allocated = getattr(self, "_allocated", 0)
        commit(self, batch)
        sync = _fsyncs[-1] if _fsyncs else (None, None)
        zeros = max(0, getattr(self, "_allocated", 0) - allocated)
        records.append(("commit", started, sync[0], sync[1], sum(item.nrecords for item in batch),
                        min(item.queued_at for item in batch), zeros))
    journal.Journal._commit = probed_commit

    for kind, owner, name in (("checkpoint", checkpoint.Checkpointer, "_checkpoint"),
                              ("entrylog_sync", entry_log.EntryLogger, "sync")):
        def wrap(original, kind=kind):
            def probed(self, *args, **kwargs):
                started = _now()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    records.append((kind, started, _now()))
            return probed
        setattr(owner, name, wrap(getattr(owner, name)))
    _watch_gc()
    _dump_when_asked(path)


def install_client() -> None:
    from pyspark_ledger.client import add_queue, add_stream, stream_answers

    queued: dict[int, collections.deque] = collections.defaultdict(collections.deque)  # by the stream's AddQueue
    bookie_of: dict[int, str] = {}
    send = add_stream.AddStream.send

    def probed_send(self, ledger_id, adds, listener):
        queued[id(self._queue)].extend((ledger_id, entry_id) for entry_id, _ in adds)
        bookie_of[id(self._queue)] = self.bookie_id
        return send(self, ledger_id, adds, listener)
    add_stream.AddStream.send = probed_send

    take = add_queue.AddQueue.take

    def probed_take(self, window):  # the stream's next write (its lock held)
        before = len(self._frames)
        batch = take(self, window)
        taken = before - len(self._frames)
        if taken:
            waiting = queued[id(self)]
            records.append(("take", _now(), bookie_of.get(id(self)), [waiting.popleft() for _ in range(taken)]))
        return batch
    add_queue.AddQueue.take = probed_take

    notify_results = stream_answers.StreamAnswers._notify_results

    def probed_notify_results(self, results, listeners):
        records.append(("deliver", _now(), self.bookie_id, [(r.ledger_id, r.entry_id) for r in results]))
        return notify_results(self, results, listeners)
    stream_answers.StreamAnswers._notify_results = probed_notify_results
    notify_runs = stream_answers.StreamAnswers._notify_runs

    def probed_notify_runs(self, groups):  # runs of OK answers (docs/protocol.md W9), by listener
        records.append(("deliver", _now(), self.bookie_id, [(ledger_id, entry) for _, spans in groups
                                                            for ledger_id, entries in spans for entry in entries]))
        return notify_runs(self, groups)
    stream_answers.StreamAnswers._notify_runs = probed_notify_runs
    _watch_gc()


SITECUSTOMIZE = """\
import os
if os.environ.get("PACED_STAGES_OUT"):
    import bench.stage_probes
    bench.stage_probes.install_bookie(os.environ["PACED_STAGES_OUT"] + f".{os.getpid()}.json",
                                      bool(os.environ.get("PACED_STAGES_GC_ONLY")))
"""
