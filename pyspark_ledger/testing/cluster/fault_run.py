"""A Jepsen-style run on the namespace cluster: run on its driver host, against its cluster file.

::

    ip netns exec <prefix>-driver python -m pyspark_ledger.testing.cluster.fault_run \\
        --cluster DIR/cluster.json --seed 1 --dir RUN_DIR

Writers (three threads and a writer process, all on the driver host) append while the seeded schedule of
``schedule(seed, ...)`` plays: two bookies partitioned from the driver (both ways), a third bookie cut
from the driver one way, the ZooKeeper leader killed (kill -9, restarted on heal), a fourth bookie
paused (SIGSTOP), the writer process paused while its ledger is recovered, and the runner's ZooKeeper
session expired once the leader is back; and, between the servers, a bookie cut from one or two other
bookies and a bookie cut from the whole ZooKeeper ensemble or from one of its servers, each symmetric or
one way as the seed draws (the driver still reaches both). Then everything heals,
every ledger is recovered and read back by two readers, and the checker judges the history
(``jepsen.runner.run_on``). The run's figures go to ``RUN_DIR/run-netns-<seed>.json`` (as the local
runs' do; ``unavailability_by_cut_s`` adds the longest wait per kind of cut, e.g. ``partition-one-way
bookie-zookeeper``) and, as one JSON line, to stdout; a failure's report (seed, schedule, minimal history) to
stderr. Exit status 0 when every check passed, 1 when one failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path

from pyspark_ledger.arg_types import number
from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.cluster.fault_cluster import LEADER_HOST, NetnsFaultCluster
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.history import History
from pyspark_ledger.testing.jepsen.runner import PROCESS_WRITER, RunConfig, run_on

DRIVER = "driver"
MIN_DURATION_S = 15.0


def schedule(seed: int, bookies: list[str], duration_s: float = 18.0, driver: str = DRIVER,
             zookeepers: list[str] | tuple[str, ...] = ()) -> list[sched.Step]:
    """The seeded schedule of a namespace run (see the module docstring): the bookie faults one after the
    other (at most two bookies cut from the driver at a time), the leader kill overlapping them, the session
    expiry after it; then a bookie cut from a pair of other bookies and, with ``zookeepers`` (the ensemble's
    host names), a bookie cut from ZooKeeper (``_cuts_between_servers``)."""
    if len(bookies) < 4:
        raise InvalidArgumentError(f"the namespace schedule needs at least 4 bookies, got {len(bookies)}")
    if not MIN_DURATION_S <= duration_s <= sched.MAX_DURATION_S:
        raise InvalidArgumentError(f"duration_s must be in {MIN_DURATION_S:g}..{sched.MAX_DURATION_S:g}, "
                                   f"got {duration_s}")
    rng = random.Random(seed)
    pair = rng.sample(sorted(bookies), 2)
    rest = [name for name in sorted(bookies) if name not in pair]
    one_way, paused = rng.sample(rest, 2)
    steps = []
    at = round(rng.uniform(0.5, 1.5), 2)
    length = round(rng.uniform(2.5, 4.0), 2)
    steps.append(sched.Step(at, sched.PARTITION, pair[0], length, {"group": (pair[1],), "peers": (driver,)}))
    at = round(at + length + rng.uniform(0.3, 1.0), 2)
    length = round(rng.uniform(2.0, 3.5), 2)
    steps.append(sched.Step(at, sched.ONE_WAY, one_way, length,
                            {"peers": (driver,), "direction": rng.choice(("in", "out"))}))
    at = round(at + length + rng.uniform(0.3, 1.0), 2)
    steps.append(sched.Step(at, sched.PAUSE, paused, round(rng.uniform(2.0, 3.0), 2)))
    steps.append(sched.Step(round(rng.uniform(2.0, 7.0), 2), sched.ZK_KILL, LEADER_HOST,
                            round(rng.uniform(2.0, 4.0), 2)))
    # after the leader is back (at most t+11 s): the runner's client session expired (the runner's zk_expiry)
    steps.append(sched.Step(round(rng.uniform(12.0, 13.5), 2), sched.ZK_EXPIRY, LEADER_HOST, 1.0))
    steps += _cuts_between_servers(rng, sorted(bookies), sorted(zookeepers))
    return sorted(steps, key=lambda step: step.at_s)


def _cuts_between_servers(rng: random.Random, bookies: list[str], zookeepers: list[str]) -> list[sched.Step]:
    """Partitions that leave the driver's routes alone (drawn after the steps above, so that those stay what
    they were for a seed): one bookie cut from another bookie (with a third one on the far side half the time);
    and one bookie cut from the whole ensemble or from a minority of its servers, for 3-11 s, sometimes longer
    than the cluster's 10 s sessions (its registration then expires and comes back). Each is symmetric or one
    way, ``in`` or ``out``, as drawn; the bookies involved may be faulty otherwise at the same time."""
    steps = []
    target, *far = rng.sample(bookies, 3)
    far = far if rng.random() < 0.5 else far[:1]
    steps.append(_cut(rng, target, far, at=rng.uniform(1.0, 12.0), length=rng.uniform(2.0, 5.0)))
    if zookeepers:
        target = rng.choice(bookies)
        minority = max(1, (len(zookeepers) - 1) // 2)
        servers = zookeepers if rng.random() < 0.5 else sorted(rng.sample(zookeepers, minority))
        steps.append(_cut(rng, target, servers, at=rng.uniform(1.0, 6.0), length=rng.uniform(3.0, 11.0)))
    return steps


def _cut(rng: random.Random, target: str, peers: list[str], at: float, length: float) -> sched.Step:
    direction = rng.choice(("both", "in", "out"))
    if direction == "both":
        return sched.Step(round(at, 2), sched.PARTITION, target, round(length, 2), {"peers": tuple(peers)})
    return sched.Step(round(at, 2), sched.ONE_WAY, target, round(length, 2),
                      {"peers": tuple(peers), "direction": direction})


def cut_label(step: sched.Step, roles: dict[str, str]) -> str:
    """What a partition step cuts, by roles: ``partition bookie-zookeeper``, ``partition-one-way bookie-driver``;
    other steps: their kind."""
    peers = step.params.get("peers") if step.kind in (sched.PARTITION, sched.ONE_WAY) else None
    if not peers:
        return step.kind
    return f"{step.kind} {roles.get(step.target, step.target)}-{roles.get(peers[0], peers[0])}"


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.cluster.fault_run",
                                     description="A Jepsen-style run on the namespace cluster (on its driver host).")
    parser.add_argument("--cluster", required=True, help="the cluster file (cluster.json) NetnsCluster wrote")
    parser.add_argument("--seed", type=number(int, lambda v: 0 <= v < 2 ** 63, "must be in 0..2^63-1"), default=1)
    parser.add_argument("--dir", required=True, help="the run's directory: histories, logs, figures")
    parser.add_argument("--duration", type=number(float, lambda v: MIN_DURATION_S <= v <= 600,
                                                  f"must be {MIN_DURATION_S:g} to 600 seconds"), default=18.0)
    parser.add_argument("--writers", type=number(int, lambda v: 1 <= v <= 16, "must be 1 to 16"), default=3)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    cluster = NetnsFaultCluster.from_file(args.cluster)
    roles = cluster.roles()
    bookies = [name for name, role in roles.items() if role == "bookie"]
    zookeepers = [name for name in cluster.network.hosts if roles.get(name) == "zookeeper"]
    steps = schedule(args.seed, bookies, args.duration, zookeepers=zookeepers)
    config = RunConfig(seed=args.seed, metadata="netns", duration_s=args.duration, writers=args.writers,
                       schedule=tuple(steps), process_writer=True)
    run_dir = Path(args.dir)
    try:
        outcome = run_on(config, cluster, run_dir)
    finally:
        cluster.close()
    numbers = dict(outcome.figures)
    numbers["ok"] = outcome.ok
    leader = cluster.hosts.get(LEADER_HOST)
    numbers["zookeeper_leaders_lost"] = list(getattr(leader, "history", []))
    numbers["zookeeper_election_s"] = list(getattr(leader, "elections_s", []))
    numbers["zookeeper_new_leaders"] = list(getattr(leader, "successors", []))
    by_cut = [dataclasses.replace(record, step=dataclasses.replace(record.step, kind=cut_label(record.step, roles)))
              for record in outcome.injected]
    history = History.load(run_dir / "history-all.jsonl")   # what the runner checked, saved by it
    numbers["unavailability_by_cut_s"] = figures.unavailability(history, by_cut, exclude=(PROCESS_WRITER,))
    figures.write(run_dir / f"run-netns-{args.seed}.json", numbers)
    if not outcome.ok:
        replay = (f"LEDGER_CLUSTER_TESTS=1 LEDGER_JEPSEN_SEED={args.seed} python3 -m pytest -q -p no:cacheprovider "
                  "tests/cluster/test_cluster_faults.py")
        print(f"{outcome.result.report(args.seed, replay)}\nnotes: {outcome.notes}\nschedule:\n"
              f"{sched.describe(outcome.steps)}", file=sys.stderr)
    print(json.dumps(numbers, sort_keys=True), flush=True)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
