"""Where each speed goal of issue 16 stands in one session: a table made from the other tables' ratios.

Every goal is a ratio of two figures of the same run (``report.ratio``: paired runs where both cells have
as many values, else the ratio of the medians) held against a bound: at least it (throughput, a read's
rate) or at most it (latency, time). A goal is *met*, *missed*, or *not measured* when its table has no
figures in this session (the benchmark was skipped, failed or not run: the table's notes say why). The
rows are found by the start of their label, so a table may gain rows without moving a goal.

Where a limit of the same run bounds what any implementation over the same transport, disk or Spark path
could reach (``limit``: a column of the same row, e.g. the bare gRPC fan-out to servers that store nothing),
the table also shows the limit's own ratio to the goal's denominator: a goal whose limit already misses it
cannot be met on this machine by work on our code, and the row says so. A limit measured over gRPC stops
bounding ours where ours no longer takes that path (``over_grpc``: our adds take the bookies' framed add ports
from the run after dd56b97 on, docs/protocol.md W11): its ratio is still shown, as a reference, and such a goal
is not counted as out of reach. The limits over gRPC are the floor and the no-op fan-out (``GRPC_LIMITS``, as
the issue names them); the durable fan-out takes its servers' framed add ports from the run after 3561662 on,
so it bounds ours. So does, at 1 MiB, the run of 3 bookies' storage engines at once on this disk (``storage3``:
the same entries stored as the bookies store them, until 2 of the 3 hold every one, with no network and no
client on the cores): whatever ours does beyond it, it must do that too. It is the first limit of both 1 MiB goals
(from the session after 9e29f71 on; before, only the floor and the fan-out were shown, both over gRPC).
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.tables import Row, Table

MET, MISSED, NOT_MEASURED = "yes", "**no**", "not measured"
GRPC_LIMITS = frozenset({"floor", "fanout"})  # the limit columns measured over gRPC


@dataclass(frozen=True)
class Goal:
    """``numerator ÷ denominator`` of the row of table ``table`` whose label starts with ``row`` held against
    ``bound`` (≥ it, or ≤ it with ``at_most``)."""

    text: str
    table: str
    row: str
    numerator: str
    denominator: str
    bound: float
    at_most: bool = False
    #: a column of the same row that bounds what ours can reach, or several: the first with figures in the session
    limit: str | tuple[str, ...] | None = None
    #: ours does not take gRPC: a limit of ``GRPC_LIMITS`` is a reference, not a bound
    over_grpc: bool = False

    def limits(self) -> tuple[str, ...]:
        return () if self.limit is None else (self.limit,) if isinstance(self.limit, str) else self.limit

    def target(self) -> str:
        return f"{'≤' if self.at_most else '≥'} {self.bound:g}"


GOALS: tuple[Goal, ...] = (
    Goal("1 KiB appends, 2,000 in flight: ours ÷ NATS JetStream R3", "replication", "1 KiB appends", "ours",
         "nats", 2.0, limit="floor", over_grpc=True),
    Goal("1 KiB appends: ours ÷ the floor (fan-out + storage CPU)", "replication", "1 KiB appends", "ours",
         "floor", 0.7),
    Goal("1 MiB appends, 8 in flight: ours ÷ NATS JetStream R3", "replication", "1 MiB appends", "ours", "nats",
         3.0, limit=("storage3", "floor", "fanout"), over_grpc=True),
    Goal("1 MiB appends: ours ÷ the bare gRPC fan-out", "replication", "1 MiB appends", "ours", "fanout", 0.75,
         limit=("storage3", "floor"), over_grpc=True),
    Goal("paced 1,000/s: p50 ours ÷ NATS's p50", "replication", "paced 1,000 × 1 KiB/s, p50 latency", "ours", "nats",
         1.0, at_most=True, limit=("durable", "fanout"), over_grpc=True),
    Goal("paced 1,000/s: p99 ours ÷ NATS's p99", "replication", "paced 1,000 × 1 KiB/s, p99 latency", "ours", "nats",
         1.0, at_most=True, limit=("durable", "fanout"), over_grpc=True),
    Goal("paced 1,000/s: p99 ours ÷ the bare fan-out's p99", "replication", "paced 1,000 × 1 KiB/s, p99 latency",
         "ours", "fanout", 2.0, at_most=True, limit="durable", over_grpc=True),
    Goal("Spark batch read: ledger ÷ parquet (rows/s)", "spark_io", "read", "ledger", "parquet", 1.0,
         limit="limit"),
    Goal("Spark batch write: ledger ÷ parquet (seconds)", "spark_io", "write", "ledger", "parquet", 1.0,
         at_most=True, limit="limit"),
    Goal("striped reads (speculative reads on, the default): E=5/Qw=3 ÷ E=Qw=3", "striped_reads",
         "whole-ledger reads, speculative reads on", "E5-Qw3", "E3-Qw3", 0.8),
    Goal("recovery of the 100,000-entry ledger: seconds ÷ 1 s", "recovery", "recovery of", "ours", "goal", 1.0,
         at_most=True),
    Goal("journal replay ÷ the plain sequential read", "replay", "journal of", "replay", "plain", 0.5),
    Goal("streaming end to end: p50 ÷ the trigger interval", "streaming_latency", "p50", "ours", "trigger", 1.5,
         at_most=True),
)


def find_row(table: Table | None, prefix: str) -> Row | None:
    """The row labelled ``prefix`` exactly, else the first whose label starts with it."""
    if table is None:
        return None
    exact = next((row for row in table.rows if row.label == prefix), None)
    return exact or next((row for row in table.rows if row.label.startswith(prefix)), None)


def judge(goal: Goal, tables: dict[str, Table], ratio) -> tuple[float | None, str]:
    """The goal's ratio in this session (None when not measured) and MET / MISSED / NOT_MEASURED; ``ratio`` is
    ``report.ratio`` (passed in: this module sits below ``report``)."""
    row = find_row(tables.get(goal.table), goal.row)
    value = None if row is None else ratio(row.cells.get(goal.numerator, []), row.cells.get(goal.denominator, []))
    if value is None:
        return None, NOT_MEASURED
    met = value <= goal.bound if goal.at_most else value >= goal.bound
    return value, MET if met else MISSED


def limit_allows(goal: Goal, tables: dict[str, Table], ratio) -> tuple[float | None, bool | None]:
    """The goal's limit column ÷ its denominator in this session, and whether that ratio itself meets the bound
    (None, None without a limit or its figures)."""
    return limit_allows_by(goal, tables, ratio)[1:]


def limit_allows_by(goal: Goal, tables: dict[str, Table], ratio) -> tuple[str | None, float | None, bool | None]:
    """``limit_allows`` and which of the goal's limit columns it used (the first with figures)."""
    row = find_row(tables.get(goal.table), goal.row)
    for limit in goal.limits() if row is not None else ():
        value = ratio(row.cells.get(limit, []), row.cells.get(goal.denominator, []))
        if value is not None:
            return limit, value, value <= goal.bound if goal.at_most else value >= goal.bound
    return None, None, None


LIMIT_NAMES = {"floor": "the floor", "fanout": "the bare gRPC fan-out",
               "storage3": "3 bookies' storage engines at once on this disk (no network, no client)",
               "durable": "the durable framed fan-out (3 servers that fdatasync each add, nothing else)",
               "limit": "the Spark limit (in-memory source + bare framed transport + disk)"}


def markdown(tables: dict[str, Table], ratio) -> str:
    lines = ["| goal (issue 16) | measured, this run | target | met | the same ratio for a limit of the run |",
             "| --- | --- | --- | --- | --- |"]
    counts = {MET: 0, MISSED: 0, NOT_MEASURED: 0}
    beyond = 0
    for goal in GOALS:
        value, verdict = judge(goal, tables, ratio)
        counts[verdict] += 1
        shown = "—" if value is None else f"{value:.2f}"
        used, bound, reachable = limit_allows_by(goal, tables, ratio)
        if bound is None:
            limit = "—"
        else:
            limit = f"{LIMIT_NAMES.get(used, used)}: {bound:.2f}"
            if goal.over_grpc and used in GRPC_LIMITS:
                limit += " (over gRPC, which our adds no longer take: a reference, not a bound)"
            elif not reachable:
                limit += " (the limit itself misses the goal)"
                beyond += 1
        lines.append(f"| {goal.text} | {shown} | {goal.target()} | {verdict} | {limit} |")
    lines += ["", f"- {counts[MET]} of {len(GOALS)} goals met, {counts[MISSED]} missed, {counts[NOT_MEASURED]} not "
                  "measured in this run. Each ratio is the one in the ratio column of the benchmark's own table "
                  "below.",
              f"- {beyond} goal{'s' if beyond != 1 else ''} cannot be met on this machine by any work on our code: a "
              "limit of the same run, which does less than ours must (the floor: the gRPC fan-out plus the storage "
              "engine's CPU with no replication logic, and for 1 MiB no more than the fan-out or 3 storage engines "
              "at once on the disk; 3 storage engines at once on the disk, with no network: what our bookies store "
              "at 1 MiB, and nothing else; the fan-out: servers that store nothing; the durable fan-out: servers that "
              "only write each add to a file and fdatasync it before answering, as any durable store must -- "
              "NATS acks from the page cache, so the paced goals against it ask a durable ack to beat one that "
              "is not; the Spark limit: the in-memory Arrow "
              "source's read or write of the same rows, plus the bare fetch or fan-out of the same bytes on the "
              "bookies' framed port, plus "
              "for the write 3 storage engines storing them on this disk), already misses it. A limit measured over "
              "gRPC bounds nothing where our adds take the bookies' framed add ports instead (docs/protocol.md W11)."]
    return "\n".join(lines)
