"""What ``ledger demo`` prints: live progress lines, then the summary as a table or as JSON.

Progress goes to ``out`` line by line (flushed, so it shows as it happens and
reads well in a log); with ``--json`` it goes to stderr and stdout holds only
the summary document. Formatting is pure: ``progress_line`` and
``summary_lines`` return text for a ``DemoSummary`` (``job.py``).
"""
from __future__ import annotations

import json
import shlex
import sys
from typing import TextIO

MB = 1_000_000


def progress_line(elapsed_s: float, writing_s: float, rows: int, batches: int, alive: int, bookies: int,
                  note: str = "") -> str:
    """One line of live progress; the rate counts from the first write (``writing_s`` ago)."""
    rate = rows / writing_s if writing_s > 0 else 0.0
    line = (f"[{elapsed_s:6.1f}s] {rows:>12,} rows committed ({rate:>9,.0f} rows/s), "
            f"{batches:>4} micro-batches, bookies alive {alive}/{bookies}")
    return f"{line}  {note}" if note else line


def kill_line(kill, bookie_name: str) -> str:
    head = (f"[{kill.at_s:6.1f}s] KILL -9 {bookie_name} ({kill.bookie_id}, pid {kill.pid}) after "
            f"{kill.paused_s:.1f} s paused (SIGSTOP)")
    if kill.ledger_id is None:
        return (f"{head}, as the stream ended: no ledger was begun with it while it was paused, so an ensemble "
                "change is likely but not certain")
    if not kill.proven:
        return (f"{head}: ledger {kill.ledger_id}, begun with it while it was paused, was closed when the kill "
                "landed, so an ensemble change is likely but not certain")
    others = kill.open_ledgers - 1
    also = "" if others <= 0 else f"; {others} other open ledger{'s' if others > 1 else ''} had it in the ensemble"
    return (f"{head}: ledger {kill.ledger_id}, begun with it while it was paused (so none of its entries is "
            f"acknowledged by it), was still being written{also}")


def summary_lines(summary) -> list[str]:
    """The human summary: a two-column table, the ensemble changes, and the verdict."""
    verdict, layout = summary.verdict, summary.layout
    rows = [
        ("stream", f"{layout.stream} ({layout.partitions} partitions, E=3 Qw=3 Qa=2{_zones_text(summary)})"),
        ("rows written (committed)", f"{verdict.expected_rows:,} in {summary.micro_batches} micro-batches"),
        ("rows read back", f"{verdict.rows_read:,}"),
        ("missing / duplicates", f"{verdict.missing:,} / {verdict.duplicates:,}"),
        ("unexpected / altered", f"{verdict.unexpected:,} / {verdict.altered:,}"),
        ("Spark warm-up", f"{summary.warmup_s:.1f} s (query start to the first write)"),
        ("data written", f"{layout.bytes / MB:,.1f} MB in {summary.write_s:.1f} s = {summary.mb_per_s:,.2f} MB/s "
                         f"({summary.rows_per_s:,.0f} rows/s) from the first write to the last commit"),
        ("after the first batch", _steady_text(summary)),
        ("ledgers / fragments", f"{layout.ledgers:,} / {layout.fragments:,} ({layout.entries:,} entries)"),
        ("bookie killed", _kill_text(summary)),
        ("ensemble changes", f"{len(layout.changes)}"),
        ("under-replicated", _underreplicated_text(summary)),
        ("orphan ledgers", f"{layout.orphan_ledgers} (failed task attempts, not part of the stream)"),
        ("elapsed", f"{summary.elapsed_s:.1f} s (read back {summary.read_s:.1f} s)"),
        ("files", _files_text(summary)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = ["", "summary", "-------"] + [f"  {name.ljust(width)}  {value}" for name, value in rows]
    lines += _change_lines(summary)
    lines += ["", _verdict_text(summary)]
    return lines


def _zones_text(summary) -> str:
    zones = summary.min_ack_quorum_zones
    return f", every ack quorum over {zones} zones" if zones > 1 else ""


def _steady_text(summary) -> str:
    if summary.steady_s <= 0:
        return "n/a (only one micro-batch)"
    return f"{summary.steady_mb_per_s:,.2f} MB/s ({summary.steady_rows_per_s:,.0f} rows/s)"


def _kill_text(summary) -> str:
    kill = summary.kill
    if kill is None:
        return summary.kill_note or "none"
    return f"{summary.bookie_names.get(kill.bookie_id, kill.bookie_id)} ({kill.bookie_id}) at {kill.at_s:.1f} s"


def _underreplicated_text(summary) -> str:
    """How many ledgers the kill left one copy short, and only advice that works after the demo exits."""
    ledgers = summary.layout.underreplicated
    if summary.kill is None or not ledgers:
        return "none"
    short = f"{len(ledgers)} ledger(s) keep sealed entries on the killed bookie, one copy short until it returns"
    if summary.cluster_file:
        return (f"{short}: restart it on its host (the cluster of {summary.cluster_file} keeps running), or copy "
                f"them to another bookie: `{_rereplicate_command(summary)}`")
    if summary.data_dir is None:
        return f"{short} (the sandbox was removed at exit; `ledger demo --data-dir DIR` keeps a cluster to repair)"
    data_dir = shlex.quote(summary.data_dir)
    return (f"{short}: `ledger sandbox --data-dir {data_dir}` restarts the cluster with it; to copy them to "
            f"another bookie instead, while that sandbox runs: `{_rereplicate_command(summary)}`")


def _rereplicate_command(summary) -> str:
    move = f"ledger --metadata {shlex.quote(summary.metadata_uri)} ledgers rereplicate --all " \
           f"--bookie {summary.kill.bookie_id}"
    if summary.repair_key_file:
        move += f" --repair-key {shlex.quote(summary.repair_key_file)}"
    return move


def _files_text(summary) -> str:
    """Only paths that still exist once the demo has exited."""
    if summary.cluster_file:
        kept = f"Spark's log kept in {summary.spark_log} (the check failed)" if summary.spark_log else \
            "Spark's log and checkpoints removed at exit (a temporary dir)"
        return f"{kept}; the cluster of {summary.cluster_file} was not started or stopped by the demo and keeps running"
    if summary.data_dir is not None:
        log = f", Spark's log {summary.spark_log}" if summary.spark_log else ""
        return f"cluster kept in {summary.data_dir} (restart: `ledger sandbox --data-dir " \
               f"{shlex.quote(summary.data_dir)}`){log}"
    if summary.spark_log:
        return f"Spark's log kept in {summary.spark_log} (the check failed); the sandbox was removed"
    return "removed at exit (a temporary dir); `ledger demo --data-dir DIR` keeps the cluster and Spark's log"


def _change_lines(summary) -> list[str]:
    changes = summary.layout.changes
    if changes:
        lines = ["", "ensemble changes (bookie replaced -> replacement, from entry):"]
        return lines + [f"  {change.describe(summary.bookie_names)}" for change in changes]
    if summary.kill is None:
        return []
    return ["", f"NO ensemble change happened: no ledger of the stream has more than one fragment "
                f"(the kill of {summary.kill.bookie_id} did not hit a write in progress)."]


def _verdict_text(summary) -> str:
    if summary.verdict.passed:
        return (f"CHECK PASSED: all {summary.verdict.expected_rows:,} committed events read back exactly once, "
                "with their exact content.")
    return "CHECK FAILED: " + "; ".join(summary.verdict.problems()) + "."


def print_summary(summary, out: TextIO = sys.stdout) -> None:
    for line in summary_lines(summary):
        print(line, file=out)
    out.flush()


def print_summary_json(summary, out: TextIO = sys.stdout) -> None:
    print(json.dumps(summary.to_dict(), indent=2, sort_keys=True), file=out)
    out.flush()


class Reporter:
    """Prints progress lines as they happen (to stderr when stdout is reserved for JSON)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)
