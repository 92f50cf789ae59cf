"""Fault actions: apply one schedule step to its host, and heal it.

``apply(step, hosts, network, hooks)`` injects the fault and returns a ``heal()`` function that undoes
it (idempotent): a partition or slow network is healed (a partition whose params name ``peers``, and
optionally more hosts of the target's side as ``group``, cuts only between those sides: the namespace
cluster's ``Network.partition``), a paused process resumed (SIGCONT), a killed
one restarted, a full disk freed. ``hooks`` supply what only the runner knows how to do: ``zk_expiry``
(expire a client's ZooKeeper session) and ``writer_pause`` (pause a writer, recover its ledger from
another client, and return what to do on resume). ``FaultLog`` records when each fault started and
was healed, for the figures of a run.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.faults import schedule as s
from pyspark_ledger.testing.faults.hosts import Host, Network

Heal = Callable[[], None]


def _once(fn: Heal) -> Heal:
    done = threading.Event()

    def heal() -> None:
        if not done.is_set():
            done.set()
            fn()
    return heal


def apply(step: s.Step, hosts: Mapping[str, Host], network: Network,
          hooks: Mapping[str, Callable[[Host], Heal]] | None = None) -> Heal:
    """Inject ``step`` now; returns its heal."""
    host = hosts.get(step.target)
    if host is None:
        raise InvalidArgumentError(f"step {step} names unknown host {step.target!r} (hosts: {sorted(hosts)})")
    hooks = hooks or {}
    kind, params = step.kind, dict(step.params)
    if kind in (s.PARTITION, s.ONE_WAY) and "peers" in params:   # host(s) from chosen hosts only
        direction = "both" if kind == s.PARTITION else str(params.get("direction", "in"))
        cut = network.partition([host.name, *params.get("group", ())], params["peers"], direction)
        return _once(lambda: network.restore(cut))
    if kind == s.PARTITION:
        network.isolate(host, "both")
        return _once(lambda: network.heal(host))
    if kind == s.ONE_WAY:
        network.isolate(host, str(params.get("direction", "in")))
        return _once(lambda: network.heal(host))
    if kind == s.DELAY:
        network.delay(host, float(params["fixed_s"]), float(params.get("jitter_s", 0.0)))
        return _once(lambda: network.heal(host))
    if kind == s.LOSS:
        network.loss(host, float(params["probability"]), float(params["hold_s"]),
                     float(params.get("reset_probability", 0.0)))
        return _once(lambda: network.heal(host))
    if kind == s.RESET:
        network.reset(host)
        return _once(lambda: None)
    if kind in (s.PAUSE, s.ZK_PAUSE):
        host.pause()
        return _once(host.resume)
    if kind in (s.KILL, s.ZK_KILL):
        host.kill()
        return _once(host.restart)
    if kind == s.DISK_FULL:
        host.fill_disk()
        return _once(host.free_disk)
    if kind in (s.ZK_EXPIRY, s.WRITER_PAUSE):
        hook = hooks.get(kind.replace("-", "_"))
        if hook is None:
            raise InvalidArgumentError(f"fault {kind} needs the runner's {kind.replace('-', '_')} hook")
        return _once(hook(host))
    raise InvalidArgumentError(f"unknown fault kind {kind!r}")


@dataclass
class Injected:
    step: s.Step
    started: float      # time.monotonic()
    healed: float | None = None
    error: str = ""


class FaultLog:
    """What was injected, when, and when it healed (thread-safe)."""

    def __init__(self) -> None:
        self.injected: list[Injected] = []
        self._lock = threading.Lock()

    def started(self, step: s.Step, error: str = "") -> Injected:
        record = Injected(step, time.monotonic(), error=error)
        with self._lock:
            self.injected.append(record)
        return record

    def healed(self, record: Injected) -> None:
        record.healed = time.monotonic()

    def per_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.injected:
            if not record.error:
                counts[record.step.kind] = counts.get(record.step.kind, 0) + 1
        return counts
