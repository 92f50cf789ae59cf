"""Where a paced add's time goes, stage by stage: client, gRPC, bookie, journal, and back.

Usage: ``python bench/paced_stages.py [--dir DIR] [--seconds 6] [--rate 1000] [--warm-up 0] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. Starts 3 bookies in ``--dir`` (ext4 under /tmp by
default; ``/dev/shm`` for tmpfs), with the probes of ``stage_probes.py`` loaded through a ``sitecustomize`` on
their PYTHONPATH (the product has no probe: nothing runs when this tool is not used), and writes 1 KiB entries
paced at ``--rate``/s through ``LedgerClient`` with E=Qw=3, Qa=2, probed in this process too. For each entry,
it takes the bookie whose answer reached the client second (the one that completed the ack quorum) and gives
p50/p99 of each gap between consecutive stamps:

  add() called -> taken by the stream's writer for a gRPC write (client) -> the bookie's reader has the
  AddBatch -> storage add started -> journal submission queued (entry log and index written) -> durable (group
  commit's fdatasync done, storage future's first callback) -> answer handed to gRPC by the handler thread ->
  the client's stream reader has it -> the future done (the benchmark's callback).

Also: the journals' group commits (fdatasync p50/p99/max, wait of the oldest submission), when slow fdatasyncs
fell (during a checkpoint or an entry-log sync or not), and the Python GC pauses of client and bookies and how
many adds were in flight during them.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import stage_probes  # noqa: E402
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

STAGES = ("called", "taken", "received", "storing", "submitted", "durable", "answered", "delivered", "done")
SLOW_FSYNC_S = 0.005


def quantiles(values: list[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {}
    pick = lambda fraction: round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000, 3)  # noqa: E731
    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(ordered[-1] * 1000, 3), "n": len(ordered)}


def drive(uri: str, seconds: float, rate: float, warm_up: float) -> list[tuple[int, float, float]]:
    """Paced 1 KiB appends, after ``warm_up`` seconds of 1 KiB and 1 MiB appends at full speed on another
    ledger (as the full benchmark runs before its paced row); (entry id, called, done) of each."""
    stamps: list[tuple[int, float, float]] = []
    lock = threading.Lock()
    data = os.urandom(1024)
    if warm_up:
        from bench.replication import client_run
        client_run(uri, 1024, warm_up, 2_000)
        client_run(uri, 1024 * 1024, warm_up, 8)
    Path(f"{os.environ['PACED_STAGES_OUT']}.reset").touch()  # the bookies' probes forget the warm-up
    stage_probes.records.clear()
    time.sleep(0.5)
    with LedgerClient(uri, ClientConfig(max_inflight_adds=1000)) as client:
        writer = client.create_ledger(3, 3, 2, password=b"bench")
        ledger_id = writer.ledger_id
        started = time.perf_counter()
        count = 0
        while time.perf_counter() - started < seconds:
            delay = started + count / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            called = time.monotonic()
            future = writer.append_async(data)

            def done(f, called=called):
                with lock:
                    stamps.append((f.result(), called, time.monotonic()))
            future.add_done_callback(done)
            count += 1
        writer.close()
    return ledger_id, stamps


def analyse(ledger_id: int, stamps, client_records, bookie_records: dict[str, list]) -> dict:
    """Per-stage gaps, journals, GC pauses; ``bookie_records`` by bookie id (as the client's streams name them)."""
    per_entry: dict[int, dict] = {entry: {"called": called, "done": done} for entry, called, done in stamps}
    for kind, at, bookie, keys in (r for r in client_records if r[0] in ("take", "deliver")):
        for ledger, entry in keys:
            if ledger == ledger_id and entry in per_entry:
                per_entry[entry].setdefault(kind, {})[bookie] = at
    by_bookie: dict[str, dict[int, dict]] = {}  # bookie id -> entry -> its stamps there
    for bookie, records in bookie_records.items():
        stage = by_bookie.setdefault(bookie, {})
        for record in records:
            if record[0] == "recv":
                for ledger, entry in record[2]:
                    if ledger == ledger_id:
                        stage.setdefault(entry, {})["received"] = record[1]
            elif record[0] == "store":
                for ledger, entry in record[4]:
                    if ledger == ledger_id:
                        stage.setdefault(entry, {}).update(storing=record[1], submitted=record[2], durable=record[3])
            elif record[0] == "answer":
                for ledger, entry in record[3]:
                    if ledger == ledger_id:
                        stage.setdefault(entry, {}).update(answered=record[1], sent=record[2])
    gaps: dict[str, list[float]] = {}
    whole = []
    rows = []
    for entry, e in per_entry.items():
        whole.append(e["done"] - e["called"])
        delivered = sorted(e.get("deliver", {}).items(), key=lambda item: item[1])
        if len(delivered) < 2:
            continue
        bookie, at = delivered[1]
        stage = by_bookie.get(bookie, {}).get(entry, {})
        row = {"called": e["called"], "taken": e.get("take", {}).get(bookie), **{k: stage.get(k) for k in
               ("received", "storing", "submitted", "durable", "answered")}, "delivered": at, "done": e["done"]}
        rows.append({"entry": entry, "bookie": bookie, **row})
        for first, second in zip(STAGES, STAGES[1:]):
            if row[first] is not None and row[second] is not None:
                gaps.setdefault(f"{first} -> {second}", []).append(row[second] - row[first])
        if stage.get("sent") is not None:
            gaps.setdefault("answered -> gRPC send done (bookie)", []).append(stage["sent"] - stage["answered"])
    result = {"whole_add": quantiles(whole), "gaps_for_the_quorum_bookie": {k: quantiles(v) for k, v in gaps.items()}}
    if os.environ.get("PACED_STAGES_RAW"):  # every add's stamps and every probe record, to match against other traces
        Path(os.environ["PACED_STAGES_RAW"]).write_text(json.dumps(
            {"adds": rows, "stamps": stamps, "client": [r for r in client_records if r[0] == "gc"], "bookies": {
                bookie: [r for r in records if r[0] in ("gc", "commit", "checkpoint", "entrylog_sync")]
                for bookie, records in bookie_records.items()}}))
    first, last = min(s[1] for s in stamps), max(s[2] for s in stamps)
    taken = [len(r[3]) for r in client_records if r[0] == "take" and first <= r[1] <= last]
    received = [len(r[2]) for records in bookie_records.values() for r in records
                if r[0] == "recv" and first <= r[1] <= last]
    result["adds_per_batch"] = {"client_gRPC_writes": len(taken), "adds_per_write": round(sum(taken) / max(1, len(taken)), 2),
                                "bookie_AddBatches_read": len(received),
                                "adds_per_AddBatch": round(sum(received) / max(1, len(received)), 2)}
    window = (min(s[1] for s in stamps), max(s[2] for s in stamps))
    result["journals"] = journals(bookie_records, window)
    result["gc"] = {"client": gc_pauses(client_records, stamps)}
    for bookie, records in bookie_records.items():
        result["gc"][f"bookie {bookie}"] = gc_pauses(records, stamps)
    return result


def journals(bookie_records: dict[str, list], window: tuple[float, float]) -> dict:
    """Each bookie's group commits during the paced run (``window``), and what else synced meanwhile."""
    out = {}
    first, last = window
    for bookie, records in bookie_records.items():
        records = [r for r in records if r[0] in ("commit", "checkpoint", "entrylog_sync") and first <= r[1] <= last]
        commits = [r for r in records if r[0] == "commit" and r[2] is not None]
        busy = [(r[1], r[2]) for r in records if r[0] in ("checkpoint", "entrylog_sync")]
        fsyncs = [r[3] - r[2] for r in commits]
        slow = [r for r in commits if r[3] - r[2] >= SLOW_FSYNC_S]
        overlapping = [r for r in slow if any(start < r[3] and r[2] < end for start, end in busy)]
        out[bookie] = {
            "group_commits": len(commits), "records_per_commit": round(sum(r[4] for r in commits) / max(1, len(commits)), 2),
            "fdatasync": quantiles(fsyncs), "oldest_queued_to_commit_start": quantiles([r[1] - r[5] for r in commits]),
            "commit_start_to_fdatasync": quantiles([r[2] - r[1] for r in commits]),
            f"fdatasyncs_over_{SLOW_FSYNC_S * 1000:.0f}ms": len(slow),
            "of_which_during_checkpoint_or_entrylog_sync": len(overlapping),
            "checkpoints": [[round(r[2] - r[1], 4)] for r in records if r[0] == "checkpoint"],
            "entrylog_syncs": quantiles([r[2] - r[1] for r in records if r[0] == "entrylog_sync"])}
    return out


def gc_pauses(records: list, stamps) -> dict:
    first, last = min(s[1] for s in stamps), max(s[2] for s in stamps)
    pauses = [r for r in records if r[0] == "gc" and first <= r[2] <= last]  # during the paced run only
    if not pauses:
        return {"collections": 0}
    hit = sum(1 for _, called, done in stamps if any(start < done and called < end for _, _, start, end in pauses
                                                     if end - start > 0.001))
    by_generation = {}
    for generation in sorted({r[1] for r in pauses}):
        took = [r[3] - r[2] for r in pauses if r[1] == generation]
        by_generation[str(generation)] = {"count": len(took), "max_ms": round(max(took) * 1000, 3),
                                          "total_ms": round(sum(took) * 1000, 2)}
    return {"by_generation": by_generation, "adds_in_flight_during_a_pause_over_1ms": hit}


def run(directory: Path, seconds: float, rate: float, warm_up: float = 0.0,
        checkpoint_interval: float | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="paced-stages-", dir=directory) as tmp:
        base = Path(tmp)
        site = base / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(stage_probes.SITECUSTOMIZE)
        out_prefix = str(base / "probes")
        saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "PACED_STAGES_OUT")}
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), saved["PYTHONPATH"]]))
        os.environ["PACED_STAGES_OUT"] = out_prefix
        try:
            uri = f"sqlite:///{base}/metadata.db?lease_seconds=5"
            stage_probes.install_client()
            flags = {} if checkpoint_interval is None else {"checkpoint_interval": checkpoint_interval}
            with BookieCluster(3, base / "bookies", uri, **flags) as cluster:
                pids = {bookie.pid: bookie.bookie_id for bookie in cluster}  # as the client names them
                load = os.getloadavg()[0]
                ledger_id, stamps = drive(uri, seconds, rate, warm_up)
                Path(f"{out_prefix}.dump").touch()  # the bookies' probes write their records now
                deadline = time.monotonic() + 60
                while (not all(Path(f"{out_prefix}.{pid}.json").exists() for pid in pids)
                       and time.monotonic() < deadline):
                    time.sleep(0.2)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        bookie_records = {bookie: json.loads(Path(f"{out_prefix}.{pid}.json").read_text())
                          for pid, bookie in pids.items()}
    result = {"directory": str(directory), "seconds": seconds, "rate": rate, "warm_up_seconds": warm_up,
              "checkpoint_interval_s": checkpoint_interval,
              "load_average_at_start": round(load, 2)}
    result.update(analyse(ledger_id, stamps, stage_probes.records, bookie_records))
    result["bookie_pids"] = {bookie: pid for pid, bookie in pids.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 6.0, help="length of the paced run")
    parser.number("--rate", float, 1000.0, help="adds per second")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the bookies' data go")
    parser.add_argument("--warm-up", type=float, default=0.0,
                        help="seconds of 1 KiB, then of 1 MiB, appends at full speed first (default none)")
    parser.add_argument("--checkpoint-interval", type=float, default=None,
                        help="the bookies' --checkpoint-interval (default theirs: 30 s)")
    args = parser.parse_args(argv)
    return emit(run(args.dir, args.seconds, args.rate, args.warm_up, args.checkpoint_interval), args.out)


if __name__ == "__main__":
    sys.exit(main())
