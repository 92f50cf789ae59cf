"""The disk space a bookie publishes with its registration, and reading it back bounded.

A bookie puts ``{"disk": {"journal": {"free_bytes": F, "total_bytes": T},
"ledgers": {...}}}`` into its registration info (``bookie_server.space_report``
measures and refreshes it). A registration is data from the network: whoever
reads it (``ledger bookies``) goes through ``read_space``, which takes only
whole numbers in 0..2**63-1 with free <= total, and calls anything else, and
the registrations of bookies older than the field, unknown (None).
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

INFO_KEY = "disk"
#: The directories a bookie reports: its journal dir and its ledger (entry log) dir.
AREAS = ("journal", "ledgers")
MAX_BYTES = 2**63 - 1


class Space(NamedTuple):
    """Free (available to the bookie) and total bytes of the file system holding one directory."""

    free_bytes: int
    total_bytes: int


def space_info(spaces: Mapping[str, Space]) -> dict[str, dict[str, int]]:
    """The value of ``info["disk"]`` for ``{area: Space}``."""
    return {area: {"free_bytes": int(space.free_bytes), "total_bytes": int(space.total_bytes)}
            for area, space in spaces.items() if area in AREAS}


def read_space(info: Mapping[str, Any]) -> dict[str, Space | None]:
    """``{area: Space or None}`` for every area of ``AREAS``; None where the info does not say it usably."""
    disk = info.get(INFO_KEY) if isinstance(info, Mapping) else None
    if not isinstance(disk, Mapping):
        return {area: None for area in AREAS}
    return {area: _space(disk.get(area)) for area in AREAS}


def _space(value: Any) -> Space | None:
    if not isinstance(value, Mapping):
        return None
    free, total = value.get("free_bytes"), value.get("total_bytes")
    if not (_byte_count(free) and _byte_count(total)) or free > total:
        return None
    return Space(free, total)


def _byte_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_BYTES
