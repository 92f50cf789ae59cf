"""Partitions between hosts of the namespace cluster: blackhole routes inside the namespaces.

``ip -n NS route add blackhole ADDR/32`` makes namespace ``NS`` drop whatever it sends to ``ADDR``: a
one-way cut from the host of ``NS`` to the host at ``ADDR``; deleting the route heals it. A symmetric
partition is the cut in both namespaces. What this machine shows (tests/cluster/test_cluster_faults.py):

- an established TCP connection across a cut *stalls* (its segments are dropped and retransmitted), it
  is never reset; once the route is deleted the held bytes arrive and the connection goes on;
- a new connection from the cut side fails at once with ``EINVAL`` (the route lookup of ``connect``
  finds the blackhole), one from the other side times out (its SYN-ACK never comes back).

``NetnsNetwork(hosts)`` takes the cluster's hosts (name -> anything with ``.netns`` and ``.address``) and
implements the faults API's ``Network`` (``pyspark_ledger.testing.faults.hosts``): ``isolate(host,
direction)`` cuts a host from every other host (``both``, ``in``: nothing reaches it, ``out``: nothing it
sends arrives), ``heal(host)`` removes every cut that involves it (``heal()``: all). Beyond the local
proxy's API it cuts chosen hosts from chosen others: ``partition(side_a, side_b, direction)`` returns a
``Cut``, ``restore(cut)`` undoes exactly that one; a route shared by two overlapping cuts stays until the
last of them is restored. Delay, loss and resets are not offered: this machine's kernel has no netem
qdisc (``tc`` offers only ``tbf``, a rate limit), so those faults stay with the user-space fault proxy
(``faults/proxy.py``); they raise ``InvalidStateError`` here.
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Iterable, Mapping

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError
from pyspark_ledger.testing.cluster import netns
from pyspark_ledger.testing.faults.hosts import Host, Network

DIRECTIONS = ("both", "in", "out")
MAX_HOSTS = 250
Pair = tuple[str, str]   # (host whose namespace drops, host it can no longer send to)


class Cut(tuple):
    """The (source, target) pairs one partition cut; handed back to ``restore``."""


class NetnsNetwork(Network):
    """Blackhole-route partitions between the hosts of a namespace cluster (see the module docstring)."""

    def __init__(self, hosts: Mapping[str, object]) -> None:
        if not 1 <= len(hosts) <= MAX_HOSTS:
            raise InvalidArgumentError(f"a namespace network has 1 to {MAX_HOSTS} hosts, got {len(hosts)}")
        self.hosts = {name: (host.netns, host.address) for name, host in hosts.items()}
        self._routes: Counter[Pair] = Counter()
        self._lock = threading.Lock()

    # --- host-to-host cuts -------------------------------------------------------------------------
    def partition(self, side_a: Iterable[str], side_b: Iterable[str], direction: str = "both") -> Cut:
        """Cut ``side_a`` from ``side_b`` (host names): ``both`` ways, ``in`` (nothing from b reaches a) or
        ``out`` (nothing a sends reaches b). Returns the cut, for ``restore``."""
        if direction not in DIRECTIONS:
            raise InvalidArgumentError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        side_a, side_b = self._names(side_a), self._names(side_b)
        if set(side_a) & set(side_b):
            raise InvalidArgumentError(f"a host cannot be on both sides of a partition: "
                                       f"{sorted(set(side_a) & set(side_b))}")
        pairs: list[Pair] = []
        if direction in ("both", "out"):
            pairs += [(a, b) for a in side_a for b in side_b]
        if direction in ("both", "in"):
            pairs += [(b, a) for a in side_a for b in side_b]
        added: list[Pair] = []
        try:
            for pair in pairs:
                self._add(pair)
                added.append(pair)
        except BaseException:
            self.restore(Cut(added))
            raise
        return Cut(pairs)

    def restore(self, cut: Cut) -> None:
        """Undo one ``partition`` (routes still wanted by another cut stay)."""
        for pair in cut:
            with self._lock:
                if self._routes[pair] <= 0:
                    continue
                self._routes[pair] -= 1
                last = self._routes[pair] == 0
                if last:
                    del self._routes[pair]
            if last:
                self._route("del", pair)

    def cuts(self) -> set[Pair]:
        """The (source, target) host pairs cut now."""
        with self._lock:
            return set(self._routes)

    def _add(self, pair: Pair) -> None:
        with self._lock:
            self._routes[pair] += 1
            first = self._routes[pair] == 1
        if first:
            try:
                self._route("add", pair)
            except BaseException:
                with self._lock:
                    del self._routes[pair]
                raise

    def _route(self, verb: str, pair: Pair) -> None:
        source, target = pair
        namespace, address = self.hosts[source][0], self.hosts[target][1]
        netns.ip_command("route", verb, "blackhole", f"{address}/32", netns=namespace, check=verb == "add")

    def _names(self, names: Iterable[str]) -> list[str]:
        names = [names] if isinstance(names, str) else list(names)
        unknown = [name for name in names if name not in self.hosts]
        if unknown or not names:
            raise InvalidArgumentError(f"a partition side names unknown hosts {unknown or '(none given)'}; "
                                       f"hosts: {', '.join(sorted(self.hosts))}")
        return names

    # --- the faults API ---------------------------------------------------------------------------
    def isolate(self, host: Host, direction: str = "both") -> None:
        others = [name for name in self.hosts if name != host.name]
        self.partition([host.name], others, direction)

    def heal(self, host: Host | str | None = None) -> None:
        name = getattr(host, "name", host)
        with self._lock:
            pairs = [pair for pair in self._routes if name is None or name in pair]
            for pair in pairs:
                del self._routes[pair]
        for pair in pairs:
            self._route("del", pair)

    def delay(self, host: Host, fixed_s: float, jitter_s: float = 0.0) -> None:
        raise InvalidStateError(_NO_NETEM.format(kind="delay"))

    def loss(self, host: Host, probability: float, hold_s: float, reset_probability: float = 0.0) -> None:
        raise InvalidStateError(_NO_NETEM.format(kind="loss"))

    def reset(self, host: Host) -> None:
        raise InvalidStateError(_NO_NETEM.format(kind="reset"))

    def close(self) -> None:
        self.heal()


_NO_NETEM = ("the namespace network cannot inject {kind}: the kernel here has no netem qdisc; use the fault proxy "
             "(pyspark_ledger.testing.faults.proxy) for delay, loss and resets")
