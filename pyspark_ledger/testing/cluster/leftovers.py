"""Removing what crashed runs of the test cluster left: namespaces whose owner process is gone.

A run's namespaces all start with its prefix (``network.PREFIX_PATTERN``) and
its owner file names the process that made them. ``stale_prefixes()`` lists
prefixes whose owner is no longer running (the pid is gone, or reused by a
process that started at another time); ``clean_prefix`` kills every process in
that run's namespaces and deletes them (the bridge and veths go with them).
"""
from __future__ import annotations

import json

from pyspark_ledger.testing.cluster import netns
from pyspark_ledger.testing.cluster.network import OWNER_DIR, PREFIX_PATTERN, process_start_time


def prefixes() -> dict[str, list[str]]:
    """Every run prefix with namespaces here -> those namespaces."""
    found: dict[str, list[str]] = {}
    for name in netns.list_namespaces():
        match = PREFIX_PATTERN.match(name)
        if match:
            found.setdefault(match.group(1), []).append(name)
    return found


def owner_alive(prefix: str) -> bool:
    try:
        owner = json.loads((OWNER_DIR / f"{prefix}.json").read_text())
        started = process_start_time(int(owner["pid"]))
        return started is not None and started == owner["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def stale_prefixes() -> list[str]:
    return [prefix for prefix in prefixes() if not owner_alive(prefix)]


def clean_prefix(prefix: str) -> list[str]:
    """Delete every namespace of run ``prefix`` (killing what runs there); the namespaces removed."""
    removed = []
    for name in prefixes().get(prefix, []):
        netns.delete_namespace(name)
        removed.append(name)
    (OWNER_DIR / f"{prefix}.json").unlink(missing_ok=True)
    return removed
