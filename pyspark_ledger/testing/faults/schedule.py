"""Seeded fault schedules: a timed list of fault steps drawn from ``random.Random(seed)``.

``generate(seed, hosts, ...)`` gives the same steps for the same seed and arguments, so a schedule is
replayed by its seed alone; ``describe(steps)`` prints one line per step. A step starts ``at_s``
seconds into the run, targets one host, and is healed ``duration_s`` later (``reset`` is instant).
At most ``max_concurrent`` bookie faults overlap, so that with five bookies and ensembles of three a
writer can always find an ensemble once it routes around the faulty ones (safety must hold whatever
happens; this keeps the run making progress, so the checks have something to check).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from pyspark_ledger.errors import InvalidArgumentError

PARTITION = "partition"
ONE_WAY = "partition-one-way"
DELAY = "delay"
LOSS = "loss"
RESET = "reset"
PAUSE = "pause"
KILL = "kill"
DISK_FULL = "disk-full"
ZK_PAUSE = "zk-pause"
ZK_EXPIRY = "zk-expiry"
ZK_KILL = "zk-kill"
WRITER_PAUSE = "writer-pause"
BOOKIE_KINDS = (PARTITION, ONE_WAY, DELAY, LOSS, RESET, PAUSE, KILL, DISK_FULL)
ZK_KINDS = (ZK_PAUSE, ZK_EXPIRY, ZK_KILL)
KINDS = BOOKIE_KINDS + ZK_KINDS + (WRITER_PAUSE,)
TARGET_ROLE = {**{kind: "bookie" for kind in BOOKIE_KINDS}, **{kind: "zookeeper" for kind in ZK_KINDS},
               WRITER_PAUSE: "writer"}
MAX_STEPS = 1000
MAX_DURATION_S = 3600.0


@dataclass(frozen=True)
class Step:
    at_s: float
    kind: str
    target: str
    duration_s: float
    params: Mapping[str, object] = field(default_factory=dict)

    @property
    def ends_s(self) -> float:
        return self.at_s + self.duration_s

    def __str__(self) -> str:
        params = " ".join(f"{key}={value}" for key, value in sorted(self.params.items()))
        return f"t+{self.at_s:6.2f}s {self.kind:<17} {self.target:<10} for {self.duration_s:5.2f}s {params}".rstrip()


def _params(kind: str, rng: random.Random) -> dict[str, object]:
    if kind == ONE_WAY:
        return {"direction": rng.choice(("in", "out"))}
    if kind == DELAY:
        return {"fixed_s": round(rng.uniform(0.05, 0.5), 3), "jitter_s": round(rng.uniform(0, 0.2), 3)}
    if kind == LOSS:
        return {"probability": round(rng.uniform(0.05, 0.3), 3), "hold_s": round(rng.uniform(0.2, 1.5), 3),
                "reset_probability": round(rng.uniform(0, 0.05), 3)}
    return {}


def generate(seed: int, hosts: Mapping[str, str], *, duration_s: float = 20.0, steps: int = 8,
             kinds: Sequence[str] = BOOKIE_KINDS, max_concurrent: int = 2, min_fault_s: float = 1.0,
             max_fault_s: float = 6.0) -> list[Step]:
    """``steps`` fault steps over ``duration_s`` seconds on ``hosts`` (name -> role), from ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise InvalidArgumentError(f"seed must be a whole number in 0..2^63-1, got {seed!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_STEPS:
        raise InvalidArgumentError(f"steps must be a whole number in 0..{MAX_STEPS}, got {steps!r}")
    if not 0 < duration_s <= MAX_DURATION_S or not 0 < min_fault_s <= max_fault_s:
        raise InvalidArgumentError(f"duration_s must be in (0, {MAX_DURATION_S:g}] and 0 < min_fault_s <= "
                                   f"max_fault_s, got {duration_s}, {min_fault_s}, {max_fault_s}")
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise InvalidArgumentError(f"unknown fault kinds {unknown} (known: {', '.join(KINDS)})")
    by_role: dict[str, list[str]] = {}
    for name, role in sorted(hosts.items()):
        by_role.setdefault(role, []).append(name)
    usable = [kind for kind in kinds if by_role.get(TARGET_ROLE[kind])]
    if not usable:
        raise InvalidArgumentError(f"no host can take any of the fault kinds {list(kinds)}")
    rng = random.Random(seed)
    chosen: list[Step] = []
    if steps == 0:
        return chosen
    for _ in range(steps * 20):
        if len(chosen) == steps:
            break
        kind = rng.choice(usable)
        at = round(rng.uniform(0, duration_s * 0.8), 2)
        length = 0.0 if kind == RESET else round(rng.uniform(min_fault_s, max_fault_s), 2)
        length = min(length, round(duration_s - at, 2))
        target = rng.choice(by_role[TARGET_ROLE[kind]])
        step = Step(at, kind, target, length, _params(kind, rng))
        if _fits(step, chosen, max_concurrent, hosts):
            chosen.append(step)
    return sorted(chosen, key=lambda s: (s.at_s, s.kind, s.target))


def _fits(step: Step, chosen: list[Step], max_concurrent: int, hosts: Mapping[str, str]) -> bool:
    """No two overlapping faults on one host, at most one on ZooKeeper or a writer at a time, and at most
    ``max_concurrent`` bookies faulty at once."""
    overlapping = [other for other in chosen if other.at_s <= step.ends_s and step.at_s <= other.ends_s]
    if any(other.target == step.target for other in overlapping):
        return False
    role = hosts[step.target]
    same_role = [other for other in overlapping if hosts[other.target] == role]
    if role != "bookie":
        return not same_role
    return len(same_role) < max_concurrent


def describe(steps: Sequence[Step]) -> str:
    return "\n".join(str(step) for step in steps) or "(no faults)"
