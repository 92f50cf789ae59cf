"""Tables from a results file (``bench/results/latest.json``): what latest.md, the plots and the README show.

A table has columns (ours, the peer, the limits) and rows (one figure each: a throughput or a latency);
every cell holds all values measured for it in the session (repeats, or a benchmark's own repetitions),
shown as the median and the range. Each ratio column divides one column by another measured in the same
run: the median of the ratios of paired values when both cells have as many values (runs interleaved),
else the ratio of the medians.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

MISSING = "—"


@dataclass
class Row:
    label: str
    unit: str
    cells: dict[str, list[float]]
    lower_is_better: bool = False


@dataclass
class Table:
    name: str
    title: str
    columns: dict[str, str]  # key -> header
    ratios: list[tuple[str, str, str]]  # (numerator key, denominator key, header)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: tuple[str, ...] = ()  # the benchmarks whose runs fill it


# --- reading the results --------------------------------------------------------------------------------
def documents(session: dict, name: str) -> list[dict]:
    """The JSON documents benchmark ``name`` wrote in this session (failed and skipped runs left out)."""
    return [record["result"] for record in session.get("benchmarks", {}).get(name, [])
            if "result" in record and "skipped" not in record["result"]]


def dig(document, path: str):
    """``document``'s value at a dotted ``path`` ("runs.1KiB.p50_ms"), or None."""
    for key in path.split("."):
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document


def gather(docs: list[dict], path: str, field_name: str | None = None) -> list[float]:
    """Every value at ``path`` over ``docs``: a number, or a list of numbers, or of dicts (then their
    ``field_name``)."""
    values: list[float] = []
    for document in docs:
        found = dig(document, path)
        items = found if isinstance(found, list) else [found]
        for item in items:
            if field_name is not None and isinstance(item, dict):
                item = item.get(field_name)
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                values.append(float(item))
    return values


def problems(session: dict, name: str) -> list[str]:
    """Why benchmark ``name`` has no figures in this session, if it has none."""
    records = session.get("benchmarks", {}).get(name)
    if records is None:
        return [f"`{name}` was not run in this session."]
    reasons = []
    for record in records:
        if "skipped" in record:
            reasons.append(f"`{name}` skipped: {record['skipped']}")
        elif "error" in record:
            last = (record["error"].strip().splitlines() or [""])[-1]
            reasons.append(f"`{name}` failed: {last}")
    return sorted(set(reasons))


# --- the tables -----------------------------------------------------------------------------------------
def append_table(session: dict) -> Table:
    ours, peer = documents(session, "replication"), documents(session, "nats_jetstream")
    table = Table("replication", "Appends: 3 bookies (E=Qw=3, Qa=2) beside NATS JetStream R3 and the limits",
                  {"ours": "ours: 3 bookies, `LedgerClient`", "nats": "NATS JetStream, 3 replicas, file storage",
                   "fsync": "limit: 3 files fsync'd", "fanout": "limit: gRPC fan-out to 3 no-op servers",
                   "storage": "limit: one bookie's storage alone, in-process",
                   "floor": "limit: the floor (fan-out + 3 × storage CPU per entry, all cores)"},
                  [("ours", "nats", "ours ÷ NATS"), ("ours", "fanout", "ours ÷ fan-out"),
                   ("ours", "floor", "ours ÷ floor")],
                  sources=("replication", "nats_jetstream"))
    paced = "paced_1KiB_1000_per_s"
    for label, unit, run_key, metric in (("1 KiB appends, 2,000 in flight", "entries/s", "1KiB", "entries_per_s"),
                                         ("1 MiB appends, 8 in flight", "MB/s", "1MiB", "mb_per_s")):
        table.rows.append(Row(label, unit, {
            "ours": gather(ours, f"runs.{run_key}.{metric}"), "nats": gather(peer, f"runs.{run_key}.{metric}"),
            "fsync": gather(ours, f"limits.{run_key}.fsync.{metric}"),
            "fanout": gather(ours, f"limits.{run_key}.grpc_fanout.{metric}"),
            "storage": gather(ours, f"bookie_storage_alone.{run_key}.{metric}") if run_key == "1KiB" else [],
            "floor": gather(ours, "where_the_time_goes.1KiB_floor.entries_per_s_if_all_cores_did_only_this")
            if run_key == "1KiB" else []}))
    for quantile in ("p50", "p99"):
        table.rows.append(Row(f"paced 1,000 × 1 KiB/s, {quantile} latency", "ms", {
            "ours": gather(ours, f"runs.{paced}.{quantile}_ms"), "nats": gather(peer, f"runs.{paced}.{quantile}_ms"),
            "fsync": [], "fanout": gather(ours, f"limits.{paced}.grpc_fanout.{quantile}_ms_to_second_ack"),
            "storage": [], "floor": []},
            lower_is_better=True))
    semantics = next((doc.get("ack_semantics") for doc in peer if doc.get("ack_semantics")), None)
    version = next((doc.get("nats_server_version") for doc in peer if doc.get("nats_server_version")), None)
    if version:
        table.notes.append(f"NATS: nats-server {version}. {semantics or ''}".strip())
    table.notes.append("Goals (issue 16), each a ratio in the same run: 1 KiB ours ÷ floor ≥ 0.7 and ≥ 2 × NATS; "
                       "1 MiB ours ÷ fan-out ≥ 0.75 and ≥ 3 × NATS; paced p99 ours ÷ fan-out ≤ 2 and p50, p99 ≤ "
                       "NATS's. The floor is the rate the CPU of the fan-out plus 3 storage adds per entry allows "
                       "if every core did only that; storage alone is one bookie's engine driven without gRPC.")
    table.notes += problems(session, "replication") + problems(session, "nats_jetstream")
    return table


def bookie_table(session: dict) -> Table:
    docs = documents(session, "bookie")
    table = Table("bookie", "One bookie: streamed adds beside the raw limits of the same disk",
                  {"ours": "one bookie", "disk": "raw limit of the same disk, same run"},
                  [("ours", "disk", "ours ÷ disk")],
                  sources=("bookie",))
    table.rows.append(Row("1 KiB adds, 4 streams × 1,000 in flight (disk: 4 KiB fsyncs/s)", "entries/s",
                          {"ours": gather(docs, "adds_1kib.entries_per_s"),
                           "disk": gather(docs, "raw_disk.fsync_4k.fsyncs_per_s")}))
    table.rows.append(Row("1 MiB adds, 2 streams × 16 in flight (disk: sequential 1 MiB fsync'd writes)", "MB/s",
                          {"ours": gather(docs, "adds_1mib.mb_per_s"),
                           "disk": gather(docs, "raw_disk.sequential_1mib_fsync.mb_per_s")}))
    table.notes += problems(session, "bookie")
    return table


def _spark_read_rates(docs: list[dict], path: str) -> list[float]:
    rates = []
    for document in docs:
        rows, read = document.get("rows"), dig(document, path)
        if not rows or not isinstance(read, dict):
            continue
        rates += [rows / seconds for seconds in (read.get("runs") or [read.get("seconds")]) if seconds]
    return rates


def spark_table(session: dict) -> Table:
    docs = documents(session, "spark_io")
    table = Table("spark_io", "Spark batch I/O: `format(\"ledger\")` beside parquet and an in-memory Arrow source",
                  {"ledger": "`ledger` (3 bookies, E=Qw=3, Qa=2)", "parquet": "parquet",
                   "arrow": "in-memory Arrow source"},
                  [("ledger", "parquet", "ledger ÷ parquet"), ("ledger", "arrow", "ledger ÷ in-memory")],
                  sources=("spark_io",))
    rows = sorted({document["rows"] for document in docs if "rows" in document})
    size = f" of {', '.join(f'{count:,}' for count in rows)} rows" if rows else ""
    table.rows.append(Row(f"write{size}", "s", {key: gather(docs, f"{source}.write.seconds") for key, source in
                                                (("ledger", "ledger"), ("parquet", "parquet"),
                                                 ("arrow", "arrow_memory"))}, lower_is_better=True))
    table.rows.append(Row(f"read{size} into `noop`", "rows/s", {
        "ledger": _spark_read_rates(docs, "ledger.read"), "parquet": _spark_read_rates(docs, "parquet.read"),
        "arrow": _spark_read_rates(docs, "arrow_memory.read_string")}))
    table.notes.append("Goals (issue 16): ledger ÷ parquet ≥ 1.0 for the read (rows/s) and ≤ 1.0 for the write "
                       "(seconds).")
    table.notes += problems(session, "spark_io")
    return table


def tls_table(session: dict) -> Table:
    docs = documents(session, "tls")
    table = Table("tls", "What mutual TLS costs: the same work on a plaintext and an mTLS cluster, interleaved",
                  {"plaintext": "plaintext", "mtls": "mutual TLS"}, [("mtls", "plaintext", "mTLS ÷ plaintext")],
                  sources=("tls",))
    for label, unit, path, metric in (
            ("1 KiB appends, 4,000 in flight", "entries/s", "sizes.1KiB.runs", "entries_per_s"),
            ("1 MiB appends, 32 in flight", "MB/s", "sizes.1MiB.runs", "mb_per_s"),
            ("Spark batch read", "rows/s", "spark_read.runs", "rows_per_s")):
        table.rows.append(Row(label, unit, {transport: gather(docs, f"{path}.{transport}", metric)
                                            for transport in ("plaintext", "mtls")}))
    table.notes += problems(session, "tls")
    return table


def striped_table(session: dict) -> Table:
    docs = documents(session, "striped_reads")
    table = Table("striped_reads", "Reads of striped ledgers (5 bookies) beside a ledger every bookie stores",
                  {"E3-Qw3": "E=Qw=3", "E5-Qw3": "E=5, Qw=3", "E3-Qw2": "E=3, Qw=2"},
                  [("E5-Qw3", "E3-Qw3", "E=5/Qw=3 ÷ E=Qw=3"), ("E3-Qw2", "E3-Qw3", "E=3/Qw=2 ÷ E=Qw=3")],
                  sources=("striped_reads",))
    entries, size = _counts(docs, "entries"), _counts(docs, "entry_bytes")
    shape = f" of {entries} × {size} B" if entries and size else ""
    for mode, label in (("speculative_reads", "whole-ledger reads, speculative reads on"),
                        ("no_speculative_reads", "whole-ledger reads, speculative reads off")):
        table.rows.append(Row(label + shape, "entries/s",
                              {key: gather(docs, f"modes.{mode}.entries_per_s.{key}.runs") for key in table.columns}))
    table.notes.append("Goal (issue 16): E=5/Qw=3 ÷ E=Qw=3 ≥ 0.8. Speculative reads ask the next replica after "
                       "the client's default delay (50 ms).")
    table.notes += problems(session, "striped_reads")
    return table


def _counts(docs: list[dict], key: str) -> str:
    return ", ".join(f"{count:,}" for count in sorted({doc[key] for doc in docs if isinstance(doc.get(key), int)}))


def _recovery_runs(docs: list[dict], default: bool, field_name: str) -> list[float]:
    """``field_name`` of the recovery runs with the default window (``default``) or with W=1 (runs written
    before the window existed read one entry at a time: W=1)."""
    values = []
    for document in docs:
        wanted = document.get("default_window") if default else 1
        for run in document.get("runs", []):
            if isinstance(run, dict) and run.get("window", 1) == wanted and isinstance(run.get(field_name), (int, float)):
                values.append(float(run[field_name]))
    return values


def recovery_table(session: dict) -> Table:
    docs = documents(session, "recovery")
    windows = sorted({doc["default_window"] for doc in docs if isinstance(doc.get("default_window"), int)})
    table = Table("recovery", "Recovery of a ledger whose writer was killed (3 bookies, E=Qw=3, Qa=2)",
                  {"ours": f"`open_ledger(recovery=True)` until CLOSED, window {', '.join(map(str, windows)) or '?'}",
                   "one": "the same, one entry at a time (W=1)", "goal": "goal (issue 16)"},
                  [("ours", "goal", "ours ÷ goal"), ("ours", "one", "window ÷ W=1")], sources=("recovery",))
    entries = _counts(docs, "entries") or "100,000"
    table.rows.append(Row(f"recovery of {entries} confirmed entries, writer killed with SIGKILL", "s",
                          {"ours": _recovery_runs(docs, True, "recovery_seconds"),
                           "one": _recovery_runs(docs, False, "recovery_seconds"),
                           "goal": gather(docs, "goal_seconds")[:1]}, lower_is_better=True))
    table.rows.append(Row("entries read forward past the last add confirmed the bookies knew", "entries",
                          {"ours": _recovery_runs(docs, True, "entries_read_forward"),
                           "one": _recovery_runs(docs, False, "entries_read_forward"), "goal": []},
                          lower_is_better=True))
    table.notes.append("The writer is killed with 2,000 adds in flight; each repetition recovers one killed writer's "
                       "ledger per window, interleaved. With W=1 recovery reads forward one entry at a time, one "
                       "round trip each; with a window (`ClientConfig.recovery_read_window`, docs/protocol.md R9) "
                       "it keeps that many entries in flight as range reads, deciding them in entry order.")
    table.notes += problems(session, "recovery")
    return table


def replay_table(session: dict) -> Table:
    docs = documents(session, "replay")
    table = Table("replay", "Journal replay on a bookie restart beside a plain sequential read of the same files",
                  {"replay": "journal replay (the bookie's log)",
                   "plain": "plain sequential read, page cache dropped first",
                   "direct": "plain read with O_DIRECT", "warm": "plain read from the page cache"},
                  [("replay", "plain", "replay ÷ plain read"), ("replay", "direct", "replay ÷ O_DIRECT read")],
                  sources=("replay",))
    size = _counts(docs, "written_mb")
    table.rows.append(Row(f"journal of {size or '?'} MB written, replayed after kill -9", "MB/s",
                          {"replay": gather(docs, "runs", "replay_mb_per_s"),
                           "plain": gather(docs, "runs", "plain_read_mb_per_s"),
                           "direct": gather(docs, "runs", "direct_read_mb_per_s"),
                           "warm": gather(docs, "runs", "warm_read_mb_per_s")}))
    table.rows.append(Row("restart: process start to ready (imports and replay included)", "s",
                          {"replay": gather(docs, "runs", "start_to_ready_seconds"), "plain": [], "direct": [],
                           "warm": []}, lower_is_better=True))
    table.notes.append("Goal (issue 16): replay ≥ 0.5 × the plain read (after `posix_fadvise(DONTNEED)`, the state "
                       "the replay starts from). On a VM the host may keep the files cached after it: when the plain "
                       "read is as fast as the warm read, its bytes came from memory, and the ratio compares replay's "
                       "CPU cost with a memory read. The O_DIRECT read bypasses the guest's page cache (the host's "
                       "may still serve it).")
    table.notes += problems(session, "replay")
    return table


def scaling_table(session: dict) -> Table:
    docs = documents(session, "scaling")
    table = Table("scaling", "1 KiB appends, 2,000 in flight, from 1 to 3 to 5 bookies (striped)",
                  {"one": "1 bookie, E=Qw=Qa=1", "three": "3 bookies, E=Qw=3, Qa=2",
                   "five": "5 bookies, E=5, Qw=3, Qa=2"},
                  [("three", "one", "3 ÷ 1"), ("five", "three", "5 striped ÷ 3")], sources=("scaling",))
    shapes = {"one": "1_bookie", "three": "3_bookies", "five": "5_bookies_striped"}
    for label, unit, metric, lower in (("throughput", "entries/s", "entries_per_s", False),
                                       ("p50 latency", "ms", "p50_ms", True), ("p99 latency", "ms", "p99_ms", True)):
        table.rows.append(Row(label, unit, {key: gather(docs, f"shapes.{shape}.runs", metric)
                                            for key, shape in shapes.items()}, lower_is_better=lower))
    table.notes += problems(session, "scaling")
    return table


def streaming_table(session: dict) -> Table:
    docs = documents(session, "streaming_latency")
    table = Table("streaming_latency", "Structured Streaming end to end: a row written until `foreachBatch` has it",
                  {"ours": "`ledger` streaming read, 1 s trigger", "trigger": "trigger interval"},
                  [("ours", "trigger", "÷ trigger")], sources=("streaming_latency",))
    trigger = [seconds * 1000.0 for seconds in gather(docs, "trigger_seconds")][:1]
    for quantile in ("p50", "p99"):
        table.rows.append(Row(f"{quantile} latency", "ms", {"ours": gather(docs, f"{quantile}_ms"),
                                                            "trigger": trigger}, lower_is_better=True))
    table.notes.append("Goal (issue 16): p50 ≤ 1.5 × the trigger interval.")
    table.notes += problems(session, "streaming_latency")
    return table


BUILDERS: dict[str, Callable[[dict], Table]] = {
    "replication": append_table, "bookie": bookie_table, "spark_io": spark_table, "tls": tls_table,
    "striped_reads": striped_table, "recovery": recovery_table, "replay": replay_table,
    "scaling": scaling_table, "streaming_latency": streaming_table}


def build_tables(session: dict) -> dict[str, Table]:
    return {name: build(session) for name, build in BUILDERS.items()}


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


def provenance(session: dict, sources: tuple[str, ...] = ()) -> str:
    """Which run the figures come from, and how loaded the machine was during the runs of ``sources``."""
    git, machine = session.get("git", {}), session.get("machine", {})
    records = [record for name in sources for record in session.get("benchmarks", {}).get(name, [])]
    loads = [record[key][0] for record in records for key in ("load_average_before", "load_average_after")
             if record.get(key)]
    if loads:
        load = f"load average {min(loads)}–{max(loads)} over its runs"
    else:
        load = f"load average {(session.get('load_average_before') or ['?'])[0]} at the start"
    text = (f"`python -m bench{' --quick' if session.get('mode') == 'quick' else ''}` of {session.get('date', '?')}, "
            f"commit {(git.get('commit') or 'unknown')[:10]}, {machine.get('cpus', '?')} cores, {load}")
    for rerun in session.get("reruns", []):
        if set(rerun.get("benchmarks", ())) & set(sources):
            text += f"; {', '.join(rerun['benchmarks'])} rerun {rerun.get('date', '?')}"
    return f"{text} ({session.get('note', session.get('mode', '?'))})"


def table_block(session: dict, table: Table) -> str:
    """A table as the README and latest.md show it: provenance, the table, its notes."""
    parts = [f"*{table.title}.* Generated from `bench/results/latest.json`: {provenance(session, table.sources)}.",
             "", markdown_table(table)]
    if table.notes:
        parts += [""] + [f"- {note}" for note in table.notes]
    return "\n".join(parts)


def markdown_document(session: dict, tables: dict[str, Table]) -> str:
    machine = session.get("machine", {})
    lines = ["# Benchmark results", "",
             f"Generated by `python -m bench` from `latest.json`. Machine: {machine.get('cpus')} cores "
             f"({machine.get('cpu_model', '')}), {machine.get('memory_gib')} GiB, {machine.get('platform')}, "
             f"Python {machine.get('python')}. Cells: median (min–max) over every value measured; ratios in "
             "the same run.", ""]
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
