"""The Spark streaming exactly-once fault run on the namespace cluster (issue 17 part 5; docs/jepsen.md).

::

    ip netns exec <prefix>-driver nice -n -10 python -m pyspark_ledger.testing.cluster.spark_fault_run \\
        --cluster DIR/cluster.json --seed 1 --dir RUN_DIR

Run on the driver host, against a cluster with Spark (``default_spec()``): a SparkSession whose driver binds
the driver host's address and whose executors run on the standalone workers (``spark_conf`` of the cluster
file) runs the job of ``jepsen.spark_run.SparkRun``: the deterministic id source written into a ``ledger``
stream with a checkpoint, the metadata in the cluster's ZooKeeper ensemble, the query restarted from its
checkpoint when it fails, and the driver "crashed" once between the sink's commit and Spark's (a batch
replayed). Meanwhile ``schedule(seed, ...)`` plays, one fault after the other so that at most two bookies are
out for a writer at a time:

- a Spark worker's host cut from one or two bookies, both ways or one way (``in``: the worker's requests never
  reach them; ``out``: their answers never reach it);
- a bookie killed (kill -9) and restarted with its data when the step ends;
- a bookie paused (SIGSTOP, then SIGCONT);
- overlapping those, the ZooKeeper leader killed (kill -9) and restarted, and an executor process of a
  worker killed (kill -9; ``executor-kill``): its tasks fail and Spark runs them again, the worker starts a
  new executor, which the step's heal waits for.

After healing, the query must commit a new batch within the bound (liveness); then it stops and a batch read
of the whole stream must hold every id of the committed batches exactly once (``check_exactly_once``). The
figures (the JSON shape of the local Spark run, ``metadata`` ``netns``) go to
``RUN_DIR/run-spark-netns-<seed>.json`` and, as one JSON line, to stdout; a failure prints its seed, the
replay command, the schedule and the batches committed (the minimal history) to stderr. Exit status 0 when
the run passed, 1 when it did not.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from pyspark_ledger.arg_types import number
from pyspark_ledger.errors import ClusterError, InvalidArgumentError, LedgerError
from pyspark_ledger.testing.cluster.fault_cluster import LEADER_HOST, NetnsFaultCluster
from pyspark_ledger.testing.cluster.fault_hosts import alive
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.spark_run import SparkRun, SparkRunConfig

EXECUTOR_KILL = "executor-kill"
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
EXECUTOR_BACK_S = 180.0
MIN_DURATION_S = 26.0
DEFAULT_DURATION_S = 26.0
#: Bounds for a cluster on a shared machine: the executors' JVMs and Python workers start after the session.
WARMUP_TIMEOUT_S = 300.0
PROGRESS_TIMEOUT_S = 120.0
REPLAY = ("LEDGER_CLUSTER_TESTS=1 LEDGER_JEPSEN_SEED={seed} python3 -m pytest -q -p no:cacheprovider "
          "tests/cluster/test_cluster_spark_faults.py")


def schedule(seed: int, bookies: list[str], workers: list[str], duration_s: float = DEFAULT_DURATION_S,
             leader: str = LEADER_HOST) -> list[sched.Step]:
    """The seeded schedule of the module docstring: the same steps for the same seed and hosts."""
    if len(bookies) < 4 or not workers:
        raise InvalidArgumentError(f"the Spark cluster schedule needs at least 4 bookies and a worker, got "
                                   f"{len(bookies)} bookies and {len(workers)} workers")
    if not MIN_DURATION_S <= duration_s <= sched.MAX_DURATION_S:
        raise InvalidArgumentError(f"duration_s must be in {MIN_DURATION_S:g}..{sched.MAX_DURATION_S:g}, "
                                   f"got {duration_s}")
    rng = random.Random(seed)
    order = rng.sample(sorted(bookies), len(bookies))
    killed, paused, cut = order[0], order[1], order[2:2 + rng.choice((1, 2))]
    worker = rng.choice(sorted(workers))
    direction = rng.choice(("both", "in", "out"))
    at, length = rng.uniform(1.0, 3.0), rng.uniform(4.0, 7.0)
    params = {"group": tuple(cut[1:]), "peers": (worker,)}
    if direction == "both":
        steps = [sched.Step(round(at, 2), sched.PARTITION, cut[0], round(length, 2), params)]
    else:
        steps = [sched.Step(round(at, 2), sched.ONE_WAY, cut[0], round(length, 2), {**params, "direction": direction})]
    at, length = at + length + rng.uniform(0.5, 2.0), rng.uniform(3.0, 6.0)
    steps.append(sched.Step(round(at, 2), sched.KILL, killed, round(length, 2)))
    at, length = at + length + rng.uniform(0.5, 2.0), rng.uniform(2.0, 4.0)
    steps.append(sched.Step(round(at, 2), sched.PAUSE, paused, round(length, 2)))
    steps.append(sched.Step(round(rng.uniform(3.0, 12.0), 2), sched.ZK_KILL, leader, round(rng.uniform(3.0, 5.0), 2)))
    steps.append(sched.Step(round(rng.uniform(4.0, duration_s - 8.0), 2), EXECUTOR_KILL, rng.choice(sorted(workers)),
                            1.0))
    return sorted(steps, key=lambda step: step.at_s)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(parent, []).append(int(entry))
    return tree


class ExecutorKiller:
    """``executor-kill`` on a worker host: SIGKILL to the executor JVMs its Spark worker started (the worker's
    descendants running ``CoarseGrainedExecutorBackend``); the heal waits until the worker runs a new one."""

    def __init__(self, description: dict) -> None:
        self.workers = {entry["name"]: int(entry["processes"]["spark-worker"]["pid"])
                        for entry in description.get("hosts", ()) if "spark-worker" in entry.get("processes", {})}
        self.killed: list[int] = []

    def executors(self, worker: str) -> list[int]:
        if worker not in self.workers:
            raise InvalidArgumentError(f"{worker!r} runs no Spark worker (workers: {sorted(self.workers)})")
        tree, found, todo = _children(), [], [self.workers[worker]]
        while todo:
            pid = todo.pop()
            for child in tree.get(pid, ()):
                todo.append(child)
                try:
                    command = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    continue
                if EXECUTOR_CLASS.encode() in command and alive(child):
                    found.append(child)
        return found

    def __call__(self, step: sched.Step):
        pids = self.executors(step.target)
        if not pids:
            raise ClusterError(f"no executor runs on {step.target} to kill")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.killed += pids

        def heal() -> None:
            deadline = time.monotonic() + EXECUTOR_BACK_S
            while not [pid for pid in self.executors(step.target) if pid not in self.killed]:
                if time.monotonic() >= deadline:
                    raise ClusterError(f"the worker on {step.target} started no new executor within "
                                       f"{EXECUTOR_BACK_S:.0f} s of the kill")
                time.sleep(0.5)
        return heal


def schedule_for(description: dict, args) -> list[sched.Step]:
    """``schedule`` for the bookies and workers of a cluster file."""
    hosts = description.get("hosts", ())
    bookies = [entry["name"] for entry in hosts if "bookie" in entry.get("processes", {})]
    return schedule(args.seed, bookies, sorted(ExecutorKiller(description).workers), args.duration)


def run(args, description: dict) -> tuple[int, dict]:
    from pyspark_ledger.spark import executor
    from pyspark_ledger.spark.session import spark_session, stop_spark_session

    cluster = NetnsFaultCluster(description)
    killer = ExecutorKiller(description)
    steps = schedule_for(description, args)
    config = SparkRunConfig(seed=args.seed, duration_s=args.duration, metadata="netns", schedule=tuple(steps),
                            rows_per_batch=args.rows_per_batch, trigger_s=1.0, max_restarts=10,
                            warmup_timeout_s=WARMUP_TIMEOUT_S, progress_timeout_s=PROGRESS_TIMEOUT_S)
    run_dir = Path(args.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    spark = spark_session("jepsen-spark-netns", log_level="WARN", log_file=run_dir / "spark-driver.log",
                          conf={**description["spark_conf"], "spark.task.maxFailures": "8"})
    try:
        outcome = SparkRun(config, cluster, run_dir, spark, started, cluster.metadata_uri,
                           extra_faults={EXECUTOR_KILL: killer}).go()
    finally:
        try:
            executor.close_all(cluster.metadata_uri)
            stop_spark_session(spark)
        finally:
            cluster.close()
    numbers = dict(outcome.figures)
    numbers["ok"] = outcome.ok
    numbers["executors_killed"] = len(killer.killed)
    figures.write(run_dir / f"run-spark-netns-{args.seed}.json", numbers)
    if not outcome.ok:
        batches = [f"t+{event.time - started:7.2f}s batch {event.entry_id}" for event in outcome.history or ()
                   if event.kind == "ok"]
        print(f"seed {args.seed} failed; replay: {REPLAY.format(seed=args.seed)}\n"
              + "\n".join(map(str, outcome.failures)) + f"\nnotes: {outcome.notes}\nschedule:\n"
              + sched.describe(outcome.steps) + f"\nrestarts: {numbers['restart_reasons']}\nreplayed batches: "
              f"{numbers['replayed_batches']}\nbatches committed:\n" + "\n".join(batches[-40:]), file=sys.stderr)
    return (0 if outcome.ok else 1), numbers


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.cluster.spark_fault_run",
                                     description="The Spark exactly-once fault run on the namespace cluster "
                                                 "(on its driver host).")
    parser.add_argument("--cluster", required=True, help="the cluster file (cluster.json) NetnsCluster wrote")
    parser.add_argument("--seed", type=number(int, lambda v: 0 <= v < 2 ** 63, "must be in 0..2^63-1"), default=1)
    parser.add_argument("--dir", required=True, help="the run's directory: checkpoint, Spark's log, figures")
    parser.add_argument("--duration", type=number(float, lambda v: MIN_DURATION_S <= v <= 600,
                                                  f"must be {MIN_DURATION_S:g} to 600 seconds"),
                        default=DEFAULT_DURATION_S)
    parser.add_argument("--rows-per-batch", type=number(int, lambda v: 1 <= v <= 100_000, "must be 1 to 100000"),
                        default=200)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    path = Path(args.cluster)
    if path.stat().st_size > 1 << 20:
        raise InvalidArgumentError(f"cluster file {path} is larger than 1 MiB")
    description = json.loads(path.read_text())
    if not description.get("spark_conf"):
        raise InvalidArgumentError(f"{path} describes no Spark (start the cluster with Spark and a driver host)")
    try:
        status, numbers = run(args, description)
    except LedgerError as exc:   # the query never warmed up, or failed more often than the run restarts it
        print(f"seed {args.seed} failed: {type(exc).__name__}: {exc}\nreplay: {REPLAY.format(seed=args.seed)}\n"
              f"schedule:\n{sched.describe(schedule_for(description, args))}\nSpark's log: "
              f"{Path(args.dir) / 'spark-driver.log'}", file=sys.stderr)
        status, numbers = 1, {"seed": args.seed, "metadata": "netns", "ok": False, "error": str(exc)[:2000]}
    print(json.dumps(numbers, sort_keys=True), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
