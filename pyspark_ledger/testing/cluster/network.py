"""The cluster's network: one namespace per host, joined by veth pairs to a bridge in a namespace of its own.

::

    with Network(["zk1", "bk1", "driver"]) as net:
        net.hosts["zk1"].address   # e.g. "10.83.17.11"
        net.hosts["zk1"].netns     # e.g. "plc4242n0-zk1"

Every name a run makes starts with its *prefix*, ``plc<pid>n<sequence>``, so
parallel runs and the leftovers of a crashed one never clash. The bridge
``br0`` lives in the namespace ``<prefix>.switch`` together with the host ends
of the veth pairs; the root namespace gets no interface, address or route, so
the cluster's traffic stays among the namespaces it made, and deleting the
namespaces removes every link. The subnet is a 10.x.y.0/24 that no route of
the root namespace covers. Each run writes an owner file
(``/run/pyspark-ledger-netns/<prefix>.json``: the owner's pid and start time);
``leftovers.clean_leftovers`` removes the namespaces of runs whose owner is gone.
"""
from __future__ import annotations

import ipaddress
import itertools
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from pyspark_ledger.errors import ClusterError, InvalidConfigurationError
from pyspark_ledger.testing.cluster import netns

PREFIX_PATTERN = re.compile(r"^(plc(\d+)n(\d+))[-.]")
OWNER_DIR = Path("/run/pyspark-ledger-netns")
SWITCH = "switch"
BRIDGE = "br0"
FIRST_HOST_OCTET = 11
_sequence = itertools.count()


def process_start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (tells a pid from a reused one), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def new_prefix() -> str:
    """``plc<pid>n<sequence>``, skipping any whose namespaces exist (left by a crashed run with this pid)."""
    existing = netns.list_namespaces()
    while True:
        prefix = f"plc{os.getpid()}n{next(_sequence)}"
        if not any(name.startswith((prefix + "-", prefix + ".")) for name in existing):
            return prefix


def choose_subnet(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that overlaps no route of this namespace."""
    rng = rng or random.Random()
    taken = []
    for line in netns.ip_command("-4", "route", "show", "table", "all").splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "prohibit", "blackhole"):
            word = line.split()[1]
        if word == "default":
            continue
        try:
            taken.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for _ in range(500):
        subnet = ipaddress.ip_network(f"10.{rng.randrange(16, 250)}.{rng.randrange(1, 250)}.0/24")
        if not any(subnet.overlaps(route) for route in taken):
            return subnet
    raise ClusterError("found no free 10.x.y.0/24 subnet: every one tried overlaps a route")


@dataclass
class Host:
    """One host: its namespace, its address, its zone, and the processes started on it (name -> HostProcess)."""

    name: str
    netns: str
    address: str
    zone: str = ""
    rack: str = ""
    roles: tuple[str, ...] = ()
    processes: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "netns": self.netns, "address": self.address, "zone": self.zone,
                "rack": self.rack, "roles": list(self.roles),
                "processes": {name: process.to_dict() for name, process in self.processes.items()}}


class Network:
    """Namespaces, a bridge and veth pairs for ``host_names`` (see the module docstring)."""

    def __init__(self, host_names: Iterable[str], *, prefix: str | None = None,
                 subnet: ipaddress.IPv4Network | None = None) -> None:
        self.host_names = list(host_names)
        if len(self.host_names) > 250 - FIRST_HOST_OCTET:
            raise InvalidConfigurationError(f"at most {250 - FIRST_HOST_OCTET} hosts fit in one /24")
        self.prefix = prefix or new_prefix()
        if not PREFIX_PATTERN.match(self.prefix + "-"):
            raise InvalidConfigurationError(f"prefix {self.prefix!r} must look like plc<pid>n<sequence>")
        self.subnet = subnet
        self.switch = f"{self.prefix}.{SWITCH}"
        self.hosts: dict[str, Host] = {}
        self.made: list[str] = []   # namespaces made so far, in order

    @property
    def owner_file(self) -> Path:
        return OWNER_DIR / f"{self.prefix}.json"

    def up(self) -> "Network":
        clash = [name for name in netns.list_namespaces() if PREFIX_PATTERN.match(name)
                 and PREFIX_PATTERN.match(name).group(1) == self.prefix]
        if clash:
            raise ClusterError(f"network namespaces {clash} exist already (a leftover?); run `python -m "
                               f"pyspark_ledger.testing.cluster down --prefix {self.prefix}`")
        try:
            self._write_owner_file()
            self.subnet = self.subnet or choose_subnet()
            addresses = list(self.subnet.hosts())[FIRST_HOST_OCTET - 1:]
            self._add(self.switch)
            netns.ip_command("link", "add", BRIDGE, "type", "bridge", netns=self.switch)
            netns.ip_command("link", "set", BRIDGE, "up", netns=self.switch)
            for index, name in enumerate(self.host_names):
                host = Host(name, f"{self.prefix}-{name}", str(addresses[index]))
                self._add(host.netns)
                self._wire(host, index)
                self.hosts[name] = host
        except BaseException:
            self.down()
            raise
        return self

    def _add(self, name: str) -> None:
        if name in netns.list_namespaces():
            raise ClusterError(f"network namespace {name} exists already (a leftover?); run "
                               f"`python -m pyspark_ledger.testing.cluster down --prefix {self.prefix}`")
        self.made.append(name)   # before: a half-made namespace is removed too
        netns.add_namespace(name)

    def _wire(self, host: Host, index: int) -> None:
        port = f"v{index}"
        netns.ip_command("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.netns,
                         netns=self.switch)
        netns.ip_command("link", "set", port, "master", BRIDGE, "up", netns=self.switch)
        netns.ip_command("addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0", netns=host.netns)
        netns.ip_command("link", "set", "eth0", "up", netns=host.netns)

    def down(self) -> list[str]:
        """Kill every process in the namespaces made and delete them; the problems met (never raises)."""
        problems = []
        for name in reversed(self.made):
            try:
                netns.delete_namespace(name)
            except Exception as exc:  # noqa: BLE001 - go on with the others; report all
                problems.append(f"{name}: {exc}")
        if not problems:
            self.made.clear()
            self.owner_file.unlink(missing_ok=True)
        return problems

    def _write_owner_file(self) -> None:
        OWNER_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        pid = os.getpid()
        self.owner_file.write_text(json.dumps({"pid": pid, "start_time": process_start_time(pid)}))

    def __enter__(self) -> "Network":
        return self.up()

    def __exit__(self, *exc: object) -> None:
        problems = self.down()
        if problems and exc[0] is None:
            raise ClusterError("could not remove the cluster's network: " + "; ".join(problems))
