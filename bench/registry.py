"""Which benchmarks ``python -m bench`` runs, with which arguments in each mode, and how often.

Each entry names a script in this directory that takes ``--out FILE`` and writes one JSON document there.
``quick`` and ``full`` are its arguments in the two modes; ``repeats`` how many times the full mode runs it
(quick mode: once). Benchmarks with the same ``group`` run interleaved, one of each in turn, ``repeats``
times (ours, the peer, ours, the peer, ...), so that both see the same machine. ``optional``: a script
another branch adds; while it is missing the runner records it as skipped instead of failing.

To add a benchmark: add an entry here and, for its table and plot, a ``Spec`` in ``report.py`` (``SPECS``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FULL_REPEATS = 3


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str
    quick: tuple[str, ...]
    full: tuple[str, ...] = ()
    repeats: int = 1
    group: str | None = None
    optional: bool = False
    timeout_s: float = 3600.0

    @property
    def path(self) -> Path:
        return HERE / self.script

    def arguments(self, quick: bool) -> tuple[str, ...]:
        return self.quick if quick else self.full


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("replication", "replication.py", ("--seconds", "1"), ("--seconds", "6"), FULL_REPEATS, "append"),
    Benchmark("nats_jetstream", "nats_peer.py", ("--seconds", "1"), ("--seconds", "6"), FULL_REPEATS, "append"),
    Benchmark("bookie", "bookie.py", ("--duration", "2"), ("--duration", "10"), FULL_REPEATS),
    Benchmark("spark_io", "spark_io.py", ("--rows", "200000", "--read-repeats", "3", "--write-repeats", "3"), ()),
    Benchmark("tls", "tls.py", ("--quick",), ()),
    # Added by the striped-reads work (issue 14); runs as soon as the script is in the checkout.
    Benchmark("striped_reads", "striped_reads.py", ("--quick",), (), optional=True),
    Benchmark("recovery", "recovery.py", ("--quick",), ("--entries", "100000", "--repeats", "3")),
    Benchmark("replay", "replay.py", ("--quick",), ()),
    Benchmark("scaling", "scaling.py", ("--quick",), ()),
    Benchmark("streaming_latency", "streaming_latency.py", ("--quick",), ()),
)


def by_name(names: list[str] | None) -> list[Benchmark]:
    """The benchmarks named (all when ``names`` is empty), in registry order; unknown names are an error."""
    known = {benchmark.name: benchmark for benchmark in BENCHMARKS}
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; --only takes: {', '.join(known)}")
    return [benchmark for benchmark in BENCHMARKS if not names or benchmark.name in names]


def schedule(benchmarks: list[Benchmark], quick: bool) -> list[tuple[Benchmark, int]]:
    """The order of the runs: (benchmark, repetition), groups interleaved, each benchmark's repeats done."""
    order: list[tuple[Benchmark, int]] = []
    done: set[str] = set()
    for benchmark in benchmarks:
        if benchmark.name in done:
            continue
        members = [other for other in benchmarks if benchmark.group and other.group == benchmark.group] or [benchmark]
        repeats = 1 if quick else max(member.repeats for member in members)
        for repetition in range(repeats):
            order.extend((member, repetition) for member in members)
        done.update(member.name for member in members)
    return order
