"""Tables from a results file (``bench/results/latest.json``): what latest.md, the plots and the README show.

A table has columns (ours, the peer, the limits) and rows (one figure each: a throughput or a latency);
every cell holds all values measured for it in the session (repeats, or a benchmark's own repetitions),
shown as the median and the range. Each ratio column divides one column by another measured in the same
run: the median of the ratios of paired values when both cells have as many values (runs interleaved),
else the ratio of the medians. Each benchmark's table is a ``tables.Spec`` here (``SPECS``).
"""
from __future__ import annotations

import statistics
from typing import Callable

from bench import goals
from bench.tables import At, Docs, Figure, Row, Spec, Table, build, dig

MISSING = "—"


# --- the tables -----------------------------------------------------------------------------------------
def _counts(docs: list[dict], key: str) -> str:
    return ", ".join(f"{count:,}" for count in sorted({doc[key] for doc in docs if isinstance(doc.get(key), int)}))


def _nats_note(docs: Docs) -> str:
    peer = docs["nats_jetstream"]
    semantics = next((doc.get("ack_semantics") for doc in peer if doc.get("ack_semantics")), None)
    version = next((doc.get("nats_server_version") for doc in peer if doc.get("nats_server_version")), None)
    return f"NATS: nats-server {version}. {semantics or ''}".strip() if version else ""


PACED = "paced_1KiB_1000_per_s"
APPENDS = Spec(
    "replication", "Appends: 3 bookies (E=Qw=3, Qa=2) beside NATS JetStream R3 and the limits",
    {"ours": "ours: 3 bookies, `LedgerClient`", "nats": "NATS JetStream, 3 replicas, file storage",
     "fsync": "limit: 3 files fsync'd", "fanout": "limit: gRPC fan-out to 3 no-op servers",
     "durable": "limit: framed fan-out to 3 servers that fdatasync each add, nothing else",
     "storage": "limit: one bookie's storage alone, in-process",
     "storage3": "limit: 3 bookies' storage engines at once on this disk, no gRPC",
     "floor": "limit: the floor (1 KiB: fan-out + 3 × storage CPU per entry, all cores; 1 MiB: see below)"},
    (("ours", "nats", "ours ÷ NATS"), ("ours", "fanout", "ours ÷ fan-out"), ("ours", "floor", "ours ÷ floor"),
     ("ours", "fsync", "ours ÷ fsync"), ("ours", "durable", "ours ÷ durable fan-out"),
     ("durable", "fanout", "durable fan-out ÷ fan-out")),
    (Figure("1 KiB appends, 2,000 in flight", "entries/s", {
        "ours": At("runs.1KiB.entries_per_s"), "nats": At("runs.1KiB.entries_per_s", source="nats_jetstream"),
        "fsync": At("limits.1KiB.fsync.entries_per_s"), "fanout": At("limits.1KiB.grpc_fanout.entries_per_s"),
        "storage": At("bookie_storage_alone.1KiB.entries_per_s"),
        "floor": At("where_the_time_goes.1KiB_floor.entries_per_s_if_all_cores_did_only_this")}),
     Figure("1 MiB appends, 8 in flight", "MB/s", {
         "ours": At("runs.1MiB.mb_per_s"), "nats": At("runs.1MiB.mb_per_s", source="nats_jetstream"),
         "fsync": At("limits.1MiB.fsync.mb_per_s"), "fanout": At("limits.1MiB.grpc_fanout.mb_per_s"),
         "storage3": At("limits.1MiB.three_storages.mb_per_s"),
         "floor": At("where_the_time_goes.1MiB_floor.mb_per_s")}),
     *(Figure(f"paced 1,000 × 1 KiB/s, {quantile} latency", "ms", {
         "ours": At(f"runs.{PACED}.{quantile}_ms"), "nats": At(f"runs.{PACED}.{quantile}_ms", source="nats_jetstream"),
         "fsync": At(f"limits.{PACED}.fsync.{quantile}_ms_to_copy_2"),
         "fanout": At(f"limits.{PACED}.grpc_fanout.{quantile}_ms_to_second_ack"),
         "durable": At(f"limits.{PACED}.grpc_fanout_durable.{quantile}_ms_to_second_ack")}, lower_is_better=True)
       for quantile in ("p50", "p99")),
     *(Figure(f"paced 1,000 × 1 KiB/s, {quantile} latency, bookies on tmpfs (fsync costs nothing: not durable)",
              "ms", {"ours": At(f"runs.{PACED}_tmpfs.{quantile}_ms"),
                     "nats": At(f"runs.{PACED}.{quantile}_ms", source="nats_jetstream"),
                     "fanout": At(f"limits.{PACED}.grpc_fanout.{quantile}_ms_to_second_ack"),
                     "durable": At(f"limits.{PACED}.grpc_fanout_durable_tmpfs.{quantile}_ms_to_second_ack")},
              lower_is_better=True)
       for quantile in ("p50", "p99"))),
    (_nats_note,
     "Goals (issue 16), each a ratio in the same run: 1 KiB ours ÷ floor ≥ 0.7 and ≥ 2 × NATS; 1 MiB ours ÷ fan-out "
     "≥ 0.75 and ≥ 3 × NATS; paced p99 ours ÷ fan-out ≤ 2 and p50, p99 ≤ NATS's. From the run after dd56b97 on our "
     "bookies take adds on their framed add port (`--add-port`, docs/protocol.md W11: the add path without gRPC) and "
     "the no-op fan-out and the floor keep gRPC, as the goals name them, so ours may pass them; the durable fan-out "
     "sends to its servers' framed add ports, as ours does (from the run after 3561662 on; gRPC before), so it "
     "bounds ours; `bench/transport_floor.py` measures the framed transport's own cost. The 1 KiB floor is the rate the CPU of "
     "the fan-out plus 3 storage adds per entry allows if every core did only that; the no-op servers of the "
     "fan-out answer as a bookie does, OK adds as runs of entry ids to a client that asks (docs/protocol.md W9, "
     "from commit 4bb3ce5 on; per add before); the fan-outs (no-op and durable) write every add as soon as the "
     "stream is free, with no window (ours keeps one AddBatch of small adds unanswered per stream, docs/protocol.md "
     "W10, from commit 83d4ace on), except that the paced no-op fan-out runs both ways, each add at once and with "
     "ours' window, and the run with the lower p99 is the limit of both paced rows (from the run after b3ba719 "
     "on); storage alone is one bookie's engine driven without gRPC. For 1 MiB the 3 storage engines run at once, one process each, on this disk with "
     "the same entries and 8 adds in flight each, durable before an add counts (each byte is written once, to the "
     "entry log, fsync'd before the journal's reference to it), at the rate until 2 of the 3 (the ack quorum) have "
     "stored every entry; the 1 MiB floor is the least of the fan-out, those "
     "3 storages, and the rate the CPU of the fan-out plus 3 storage adds per entry allows on all cores: each is a "
     "part any writer pays, measured alone, so the floor is an upper bound. In the paced rows the fsync limit is the paced fsync floor: 1 KiB records "
     "paced at 1,000/s to 3 files, each group-committed by its own writer (append, fdatasync), to the second "
     "durable copy. The durable fan-out (`bench/durable_bookies.py`) is the bare fan-out's client and load sent to 3 "
     "servers that make each add durable before answering it and do nothing else, over their framed add ports served "
     "by the bookie's own listener: each writes an add's body to "
     "its own preallocated file in a fresh directory beside the bookies' (removed after) as it arrives, and the "
     "stream's reader thread fdatasyncs and answers it at once, as a bookie's journal does for an add that finds it "
     "idle (docs/protocol.md B1; from the run after 8f4196e on; before, the reader handed every add to a sync "
     "thread, which ours no longer does), "
     "in runs as a bookie does (from the run after 86b59fe on, the no-op and durable servers' processes get a bookie's "
     "malloc thresholds and a durable server's reader wakes its handler only when it has work: before, each add "
     "cost them a map and an unmap and the durable servers a thread wake-up that bookies were spared); "
     "it runs before and after ours, each time both ways as the paced no-op fan-out (from the run after c1d1032 on), and "
     "the run with the lowest p99 counts; latency "
     "to the second ack, so no durable server over this transport and disk can beat it. NATS acks from the page cache (it does not fsync before its ack), so for the paced rows "
     "ours ÷ NATS compares a durable ack with one that is not; the goals table holds the durable fan-out against "
     "NATS as the limit of those goals, and the 3 storage engines at once (no network, no client: a part of "
     "ours' own work) as the limit of both 1 MiB goals (from the run of 3c39807 on, in which the bookies and the "
     "storage engines also began to allocate entry-log blocks ahead, docs/protocol.md B8). The tmpfs rows run the same paced load on 3 bookies whose directories, and "
     "the durable fan-out whose files, are on tmpfs, where fdatasync costs nothing (an extra row: what the disk "
     "adds; the real, durable run is the row above)."),
    sources=("replication", "nats_jetstream"))

BOOKIE = Spec(
    "bookie", "One bookie: streamed adds beside the raw limits of the same disk",
    {"ours": "one bookie", "disk": "raw limit of the same disk, same run"}, (("ours", "disk", "ours ÷ disk"),),
    (Figure("1 KiB adds, 4 streams × 1,000 in flight (disk: 4 KiB fsyncs/s)", "entries/s",
            {"ours": At("adds_1kib.entries_per_s"), "disk": At("raw_disk.fsync_4k.fsyncs_per_s")}),
     Figure("1 MiB adds, 2 streams × 16 in flight (disk: sequential 1 MiB fsync'd writes)", "MB/s",
            {"ours": At("adds_1mib.mb_per_s"), "disk": At("raw_disk.sequential_1mib_fsync.mb_per_s")})))


def _spark_read_rates(docs: list[dict], path: str, _field: str | None = None) -> list[float]:
    rates = []
    for document in docs:
        rows, read = document.get("rows"), dig(document, path)
        if not rows or not isinstance(read, dict):
            continue
        rates += [rows / seconds for seconds in (read.get("runs") or [read.get("seconds")]) if seconds]
    return rates


def _spark_rows(docs: Docs) -> str:
    rows = sorted({document["rows"] for document in docs["spark_io"] if "rows" in document})
    return f" of {', '.join(f'{count:,}' for count in rows)} rows" if rows else ""


SPARK_IO = Spec(
    "spark_io", "Spark batch I/O: `format(\"ledger\")` beside parquet and an in-memory Arrow source",
    {"ledger": "`ledger` (3 bookies, E=Qw=3, Qa=2)", "parquet": "parquet", "arrow": "in-memory Arrow source",
     "limit": "limit: any `ledger` path (in-memory source + bare framed transport + disk, see below)"},
    (("ledger", "parquet", "ledger ÷ parquet"), ("ledger", "arrow", "ledger ÷ in-memory"),
     ("ledger", "limit", "ledger ÷ limit"), ("limit", "parquet", "limit ÷ parquet")),
    (Figure(lambda docs: f"write{_spark_rows(docs)}", "s",
            {"ledger": At("ledger.write.seconds"), "parquet": At("parquet.write.seconds"),
             "arrow": At("arrow_memory.write.seconds"), "limit": At("limits.write.seconds")}, lower_is_better=True),
     Figure(lambda docs: f"read{_spark_rows(docs)} into `noop`", "rows/s",
            {"ledger": At("ledger.read", read=_spark_read_rates), "parquet": At("parquet.read", read=_spark_read_rates),
             "arrow": At("arrow_memory.read_string", read=_spark_read_rates),
             "limit": At("limits.read.rows_per_s")})),
    ("Goals (issue 16): ledger ÷ parquet ≥ 1.0 for the read (rows/s) and ≤ 1.0 for the write (seconds).",
     "The limit (`bench/spark_limits.py`) counts what any `ledger` read or write over the same Spark Python data "
     "source path, transport and disk must pay, each part measured in the same run and taken at its cheapest "
     "run: for the read, the in-memory source's read of the same rows and schema, and a bare fetch of the "
     "stream's entry bytes from 3 servers holding them in memory, answering range reads in our wire format on "
     "their framed ports' read connections, as ours' reads travel (`bench/bare_fetch.py`, docs/protocol.md W12); "
     "for the write, the in-memory sink's write of the same rows, the bare fan-out of entries of the stream's "
     "size to 3 no-op servers over their framed add ports, as ours' adds travel (W11), and 3 bookies' storage "
     "engines storing the stream's "
     "entries at once on this disk, durable, until 2 of 3 hold every entry. The limit's time is the largest of "
     "each part's own time and the CPU of all parts spread over every core: an upper bound on speed, since the "
     "parts run alone and a real path pays them at once on the same cores.",))

TLS = Spec(
    "tls", "What mutual TLS costs: the same work on a plaintext and an mTLS cluster, interleaved",
    {"plaintext": "plaintext", "mtls": "mutual TLS"}, (("mtls", "plaintext", "mTLS ÷ plaintext"),),
    tuple(Figure(label, unit, {transport: At(f"{path}.{transport}", metric) for transport in ("plaintext", "mtls")})
          for label, unit, path, metric in (
              ("1 KiB appends, 4,000 in flight", "entries/s", "sizes.1KiB.runs", "entries_per_s"),
              ("1 MiB appends, 32 in flight", "MB/s", "sizes.1MiB.runs", "mb_per_s"),
              ("Spark batch read", "rows/s", "spark_read.runs", "rows_per_s"))))


def _striped_shape(docs: Docs) -> str:
    entries, size = _counts(docs["striped_reads"], "entries"), _counts(docs["striped_reads"], "entry_bytes")
    return f" of {entries} × {size} B" if entries and size else ""


STRIPED_LEDGERS = {"E3-Qw3": "E=Qw=3", "E5-Qw3": "E=5, Qw=3", "E3-Qw2": "E=3, Qw=2"}
STRIPED_READS = Spec(
    "striped_reads", "Reads of striped ledgers (5 bookies) beside a ledger every bookie stores", STRIPED_LEDGERS,
    (("E5-Qw3", "E3-Qw3", "E=5/Qw=3 ÷ E=Qw=3"), ("E3-Qw2", "E3-Qw3", "E=3/Qw=2 ÷ E=Qw=3")),
    tuple(Figure(lambda docs, label=label: label + _striped_shape(docs), "entries/s",
                 {key: At(f"modes.{mode}.entries_per_s.{key}.runs") for key in STRIPED_LEDGERS})
          for mode, label in (("speculative_reads", "whole-ledger reads, speculative reads on"),
                              ("no_speculative_reads", "whole-ledger reads, speculative reads off"))),
    ("Goal (issue 16): E=5/Qw=3 ÷ E=Qw=3 ≥ 0.8. Speculative reads ask the next replica after the client's default "
     "delay (50 ms).",))


def _recovery_runs(default: bool) -> Callable[[list[dict], str, str | None], list[float]]:
    """A reader of the recovery runs' ``path`` field with the default window (``default``) or with W=1 (runs
    written before the window existed read one entry at a time: W=1)."""
    def read(docs: list[dict], field_name: str, _field: str | None = None) -> list[float]:
        values = []
        for document in docs:
            wanted = document.get("default_window") if default else 1
            for run in document.get("runs", []):
                if isinstance(run, dict) and run.get("window", 1) == wanted and \
                        isinstance(run.get(field_name), (int, float)):
                    values.append(float(run[field_name]))
        return values
    return read


def _recovery_windows(docs: Docs) -> str:
    windows = sorted({doc["default_window"] for doc in docs["recovery"] if isinstance(doc.get("default_window"), int)})
    return f"`open_ledger(recovery=True)` until CLOSED, window {', '.join(map(str, windows)) or '?'}"


RECOVERY = Spec(
    "recovery", "Recovery of a ledger whose writer was killed (3 bookies, E=Qw=3, Qa=2)",
    {"ours": _recovery_windows, "one": "the same, one entry at a time (W=1)", "goal": "goal (issue 16)"},
    (("ours", "goal", "ours ÷ goal"), ("ours", "one", "window ÷ W=1")),
    (Figure(lambda docs: f"recovery of {_counts(docs['recovery'], 'entries') or '100,000'} confirmed entries, "
                         "writer killed with SIGKILL", "s",
            {"ours": At("recovery_seconds", read=_recovery_runs(True)),
             "one": At("recovery_seconds", read=_recovery_runs(False)), "goal": At("goal_seconds", first=True)},
            lower_is_better=True),
     Figure("entries read forward past the last add confirmed the bookies knew", "entries",
            {"ours": At("entries_read_forward", read=_recovery_runs(True)),
             "one": At("entries_read_forward", read=_recovery_runs(False))}, lower_is_better=True)),
    ("The writer is killed with 2,000 adds in flight; each repetition recovers one killed writer's ledger per "
     "window, interleaved. With W=1 recovery reads forward one entry at a time, one round trip each; with a window "
     "(`ClientConfig.recovery_read_window`, docs/protocol.md R9) it keeps that many entries in flight as range "
     "reads, deciding them in entry order.",))

REPLAY = Spec(
    "replay", "Journal replay on a bookie restart beside a plain sequential read of the same files",
    {"replay": "journal replay (the bookie's log)", "plain": "plain sequential read, page cache dropped first",
     "direct": "plain read with O_DIRECT", "warm": "plain read from the page cache"},
    (("replay", "plain", "replay ÷ plain read"), ("replay", "direct", "replay ÷ O_DIRECT read")),
    (Figure(lambda docs: f"journal of {_counts(docs['replay'], 'written_mb') or '?'} MB written, replayed after "
                         "kill -9", "MB/s",
            {key: At("runs", f"{key}_mb_per_s" if key == "replay" else f"{key}_read_mb_per_s")
             for key in ("replay", "plain", "direct", "warm")}),
     Figure("restart: process start to ready (imports and replay included)", "s",
            {"replay": At("runs", "start_to_ready_seconds")}, lower_is_better=True)),
    ("Goal (issue 16): replay ≥ 0.5 × the plain read (after `posix_fadvise(DONTNEED)`, the state the replay starts "
     "from). On a VM the host may keep the files cached after it: when the plain read is as fast as the warm read, "
     "its bytes came from memory, and the ratio compares replay's CPU cost with a memory read. The O_DIRECT read "
     "bypasses the guest's page cache (the host's may still serve it).",))

SCALING_SHAPES = {"one": "1_bookie", "three": "3_bookies", "five": "5_bookies_striped"}
SCALING = Spec(
    "scaling", "1 KiB appends, 2,000 in flight, from 1 to 3 to 5 bookies (striped)",
    {"one": "1 bookie, E=Qw=Qa=1", "three": "3 bookies, E=Qw=3, Qa=2", "five": "5 bookies, E=5, Qw=3, Qa=2"},
    (("three", "one", "3 ÷ 1"), ("five", "three", "5 striped ÷ 3")),
    tuple(Figure(label, unit, {key: At(f"shapes.{shape}.runs", metric) for key, shape in SCALING_SHAPES.items()},
                 lower_is_better=lower)
          for label, unit, metric, lower in (("throughput", "entries/s", "entries_per_s", False),
                                             ("p50 latency", "ms", "p50_ms", True),
                                             ("p99 latency", "ms", "p99_ms", True))))

STREAMING_LATENCY = Spec(
    "streaming_latency", "Structured Streaming end to end: a row written until `foreachBatch` has it",
    {"ours": "`ledger` streaming read, 1 s trigger", "trigger": "trigger interval"},
    (("ours", "trigger", "÷ trigger"),),
    tuple(Figure(f"{quantile} latency", "ms", {"ours": At(f"{quantile}_ms"),
                                               "trigger": At("trigger_seconds", scale=1000.0, first=True)},
                 lower_is_better=True) for quantile in ("p50", "p99")),
    ("Goal (issue 16): p50 ≤ 1.5 × the trigger interval.",))

SPECS: tuple[Spec, ...] = (APPENDS, BOOKIE, SPARK_IO, TLS, STRIPED_READS, RECOVERY, REPLAY, SCALING, STREAMING_LATENCY)


def build_tables(session: dict) -> dict[str, Table]:
    return {spec.name: build(session, spec) for spec in SPECS}


# --- numbers and Markdown -------------------------------------------------------------------------------
def number(value: float) -> str:
    if value != value:  # NaN
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell_text(values: list[float]) -> str:
    if not values:
        return MISSING
    middle, low, high = number(statistics.median(values)), number(min(values)), number(max(values))
    return middle if low == high else f"{middle} ({low}–{high})"


def ratio(numerator: list[float], denominator: list[float]) -> float | None:
    if not numerator or not denominator:
        return None
    if len(numerator) == len(denominator) and all(denominator):
        return statistics.median(a / b for a, b in zip(numerator, denominator))
    bottom = statistics.median(denominator)
    return statistics.median(numerator) / bottom if bottom else None


def ratio_text(row: Row, numerator: str, denominator: str) -> str:
    value = ratio(row.cells.get(numerator, []), row.cells.get(denominator, []))
    return MISSING if value is None else f"{value:.2f}"


def markdown_table(table: Table) -> str:
    headers = ["workload", *table.columns.values(), *(header for _, _, header in table.ratios)]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    for row in table.rows:
        direction = "lower is better" if row.lower_is_better else "higher is better"
        cells = [f"{row.label} ({row.unit}; {direction})",
                 *(cell_text(row.cells.get(key, [])) for key in table.columns),
                 *(ratio_text(row, top, bottom) for top, bottom, _ in table.ratios)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def commit_text(git: dict | None) -> str:
    """The commit a run's code came from, and whether tracked files differed from it."""
    git = git or {}
    text = f"commit {(git.get('commit') or 'unknown')[:10]}"
    return text + (" with uncommitted changes" if git.get("uncommitted_changes") else "")


def provenance(session: dict, sources: tuple[str, ...] = ()) -> str:
    """Which run the figures come from, and how loaded the machine was during the runs of ``sources``."""
    git, machine = session.get("git"), session.get("machine", {})
    records = [record for name in sources for record in session.get("benchmarks", {}).get(name, [])]
    loads = [record[key][0] for record in records for key in ("load_average_before", "load_average_after")
             if record.get(key)]
    if loads:
        load = f"load average {min(loads)}–{max(loads)} over its runs"
    else:
        load = f"load average {(session.get('load_average_before') or ['?'])[0]} at the start"
    text = (f"`python -m bench{' --quick' if session.get('mode') == 'quick' else ''}` of {session.get('date', '?')}, "
            f"{commit_text(git)}, {machine.get('cpus', '?')} cores, {load}")
    for rerun in session.get("reruns", []):
        if set(rerun.get("benchmarks", ())) & set(sources):
            text += f"; {', '.join(rerun['benchmarks'])} rerun {rerun.get('date', '?')}"
            text += f" at {commit_text(rerun.get('git'))}"
    return f"{text} ({session.get('note', session.get('mode', '?'))})"


def table_block(session: dict, table: Table) -> str:
    """A table as the README and latest.md show it: provenance, the table, its notes."""
    parts = [f"*{table.title}.* Generated from `bench/results/latest.json`: {provenance(session, table.sources)}.",
             "", markdown_table(table)]
    if table.notes:
        parts += [""] + [f"- {note}" for note in table.notes]
    return "\n".join(parts)


def goals_block(session: dict, tables: dict[str, Table]) -> str:
    """Where each goal of issue 16 stands, from the ratios of ``tables`` (``goals.GOALS``)."""
    sources = tuple(dict.fromkeys(source for table in tables.values() for source in table.sources))
    return (f"*Where each speed goal of issue 16 stands.* Generated from `bench/results/latest.json`: "
            f"{provenance(session, sources)}.\n\n{goals.markdown(tables, ratio)}")


def blocks(session: dict) -> dict[str, str]:
    """Every generated block by name: each benchmark's table, and ``goals``."""
    tables = build_tables(session)
    found = {name: table_block(session, table) for name, table in tables.items()}
    found["goals"] = goals_block(session, tables)
    return found


def markdown_document(session: dict, tables: dict[str, Table]) -> str:
    machine = session.get("machine", {})
    lines = ["# Benchmark results", "",
             f"Generated by `python -m bench` from `latest.json`. Machine: {machine.get('cpus')} cores "
             f"({machine.get('cpu_model', '')}), {machine.get('memory_gib')} GiB, {machine.get('platform')}, "
             f"Python {machine.get('python')}. Cells: median (min–max) over every value measured; ratios in "
             "the same run.", "", "## goals", "", goals_block(session, tables), ""]
    for table in tables.values():
        lines += [f"## {table.name}", "", table_block(session, table), ""]
    lines += ["## Runs", "", "| benchmark | run | seconds | load before → after | status |",
              "| --- | --- | --- | --- | --- |"]
    for name, records in session.get("benchmarks", {}).items():
        for record in records:
            status = "skipped" if "skipped" in record else "failed" if "error" in record else "ok"
            before, after = record.get("load_average_before", ["?"]), record.get("load_average_after", ["?"])
            lines.append(f"| {name} | {record.get('repetition', 0) + 1} | {record.get('seconds', MISSING)} | "
                         f"{before[0]} → {after[0]} | {status} |")
    return "\n".join(lines) + "\n"
