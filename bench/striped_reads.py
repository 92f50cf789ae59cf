"""Benchmark reads of striped ledgers (E > Qw) against a ledger every bookie stores in full (E = Qw), in one run.

Usage: ``python bench/striped_reads.py [--entries 20000] [--entry-bytes 100] [--repetitions 5] [--quick]
[--out FILE]``.

Starts 5 real bookie processes (SQLite metadata in a temporary directory), writes the same entries to three
closed ledgers -- E=Qw=3 (the baseline: one contiguous range read per batch), E=5/Qw=3 and E=3/Qw=2
(``ledger simpletest``'s defaults; both striped: no bookie stores every entry) -- and reads each back whole
with ``LedgerReader.read`` (the path of ``ledger ledgers read`` and of Spark's reads), after one untimed
read of each that checks every byte. The timed reads alternate between the ledgers (E=Qw=3, E=5/Qw=3,
E=3/Qw=2, E=Qw=3, ...) so that all see the same machine, ``--repetitions`` times each, with speculative
reads on (the client's default delay) and then off. Each read opens the ledger anew on one client per mode.
Reported per mode and ledger: the median and the range (min..max) of entries/s, and each timed read's
counts of range reads sent, of those sent speculatively, of answers that came too late to be used and of
answers that were errors (``LedgerReader.read_stats``); per mode the ratio of each
striped ledger's median to the baseline's (goal: E=5/Qw=3 at least 0.8 x E=Qw=3). Bookies and client share
this machine's cores: the load averages (and ``uptime``) at the start and the end say what else ran.
Prints one JSON document (and writes it with ``--out``). ``--quick``: 2,000 entries, 1 repetition (a smoke
run, not a measurement).
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402

from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

LEDGERS = {"E3-Qw3": (3, 3, 2), "E5-Qw3": (5, 3, 2), "E3-Qw2": (3, 2, 2)}
BASELINE = "E3-Qw3"
GOAL = {"ledger": "E5-Qw3", "ratio_to_baseline_at_least": 0.8}
BOOKIES = 5
PASSWORD = b"bench-striped"
QUICK_ENTRIES = 2_000


def payload(index: int, size: int) -> bytes:
    head = b"%010d" % index
    return (head * (size // len(head) + 1))[:size]


def load() -> dict:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "uptime": uptime}


def write_ledgers(client: LedgerClient, entries: int, size: int) -> dict[str, int]:
    """The same entries in one closed ledger per shape; returns name -> ledger id."""
    ids = {}
    for name, quorums in LEDGERS.items():
        with client.create_ledger(*quorums, password=PASSWORD) as writer:
            futures = [writer.append_async(payload(index, size)) for index in range(entries)]
            for future in futures:
                future.result(120)
        ids[name] = writer.ledger_id
    return ids


def check_read(client: LedgerClient, ledger_id: int, entries: int, size: int) -> None:
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    for expected, entry in enumerate(reader.read()):
        if entry.entry_id != expected or entry.data != payload(expected, size):
            raise RuntimeError(f"ledger {ledger_id} entry {entry.entry_id} is not what was written")
    if reader.last_add_confirmed != entries - 1:
        raise RuntimeError(f"ledger {ledger_id} ends at {reader.last_add_confirmed}, not {entries - 1}")


def timed_read(client: LedgerClient, ledger_id: int, entries: int) -> tuple[float, dict[str, int]]:
    """Entries/s of one whole read (opening the ledger included), and the reader's ``read_stats``."""
    started = time.perf_counter()
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    count = sum(1 for _ in reader.read(copy=False))
    seconds = time.perf_counter() - started
    if count != entries:
        raise RuntimeError(f"read {count} entries of ledger {ledger_id}, not {entries}")
    return entries / seconds, reader.read_stats


def summary(rates: list[float]) -> dict:
    return {"median": round(statistics.median(rates)), "min": round(min(rates)), "max": round(max(rates)),
            "runs": [round(rate) for rate in rates]}


def one_mode(uri: str, ids: dict[str, int], entries: int, size: int, repetitions: int,
             speculative: float | None) -> dict:
    with LedgerClient(uri, ClientConfig(speculative_read_delay_s=speculative)) as client:
        for ledger_id in ids.values():  # untimed: every byte checked, connections and caches warm
            check_read(client, ledger_id, entries, size)
        rates: dict[str, list[float]] = {name: [] for name in ids}
        stats: dict[str, list[dict[str, int]]] = {name: [] for name in ids}
        for _ in range(repetitions):
            for name, ledger_id in ids.items():
                rate, counts = timed_read(client, ledger_id, entries)
                rates[name].append(rate)
                stats[name].append(counts)
    summarized = {name: summary(done) for name, done in rates.items()}
    base = summarized[BASELINE]["median"]
    ratios = {f"{name} / {BASELINE}": round(summarized[name]["median"] / base, 2) for name in ids if name != BASELINE}
    return {"speculative_read_delay_s": speculative, "entries_per_s": summarized, "median_ratios": ratios,
            "range_reads_per_read": {name: per_read(done) for name, done in stats.items()}}


def per_read(stats: list[dict[str, int]]) -> dict[str, list[int]]:
    """Each counter of ``LedgerReader.read_stats`` as a list over the timed reads, in their order."""
    return {name: [counts[name] for counts in stats] for name in stats[0]}


def run(entries: int, size: int, repetitions: int) -> dict:
    shapes = {name: dict(zip(("E", "Qw", "Qa"), quorums)) for name, quorums in LEDGERS.items()}
    result: dict = {"benchmark": "striped_reads", "cpus": os.cpu_count(), "python": platform.python_version(),
                    "bookies": BOOKIES, "ledgers": shapes,
                    "entries": entries, "entry_bytes": size, "repetitions": repetitions,
                    "order": "interleaved: " + ", ".join(LEDGERS) + ", ...", "goal": GOAL, "at_start": load()}
    with tempfile.TemporaryDirectory(prefix="bench-striped-") as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(BOOKIES, Path(tmp) / "bookies", uri):
            with LedgerClient(uri, ClientConfig()) as client:
                started = time.perf_counter()
                ids = write_ledgers(client, entries, size)
                result["write_seconds_all_ledgers"] = round(time.perf_counter() - started, 1)
            default_delay = ClientConfig().speculative_read_delay_s
            result["modes"] = {
                "speculative_reads": one_mode(uri, ids, entries, size, repetitions, default_delay),
                "no_speculative_reads": one_mode(uri, ids, entries, size, repetitions, None),
            }
    ratio = min(mode["median_ratios"][f"{GOAL['ledger']} / {BASELINE}"] for mode in result["modes"].values())
    result["goal_met"] = ratio >= GOAL["ratio_to_baseline_at_least"]
    result["at_end"] = load()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, quick=f"{QUICK_ENTRIES} entries, 1 repetition: a smoke run")
    parser.number("--entries", int, 20_000, QUICK_ENTRIES, help="entries per ledger")
    parser.number("--entry-bytes", int, 100, help="payload bytes per entry")
    parser.number("--repetitions", int, 5, 1, help="timed reads per ledger and mode")
    args = parser.parse_args(argv)
    log_warnings()
    return emit(run(args.entries, args.entry_bytes, args.repetitions), args.out)


if __name__ == "__main__":
    sys.exit(main())
