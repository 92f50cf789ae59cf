"""Where a bookie stands -- its zone and rack -- as it publishes them and as readers take them back.

A bookie started with ``--zone NAME --rack NAME`` puts ``{"zone": NAME, "rack": NAME}``
into its registration info. Names are 1..``MAX_NAME_CHARS`` characters of
``NAME_CHARS`` (letters, digits, ``.``, ``_``, ``-``); ``check_name`` enforces
that where a name enters (the bookie's flags). A registration is data from the
network: ``read_location`` takes a name only if it passes the same check and
reads anything else -- a missing field (a bookie older than the field), a
number, an over-long or odd string -- as the default, so old registrations
keep working and every bookie without a zone sits in one shared zone
(placement then behaves exactly as without zones: docs/protocol.md P4).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

ZONE_KEY = "zone"
RACK_KEY = "rack"
DEFAULT_ZONE = "default-zone"
DEFAULT_RACK = "default-rack"
MAX_NAME_CHARS = 64
NAME_CHARS = "letters, digits, '.', '_' and '-'"
_NAME = re.compile(r"[A-Za-z0-9._-]+")


class Location(NamedTuple):
    """A bookie's zone (failure domain: a data centre or availability zone) and its rack within it."""

    zone: str = DEFAULT_ZONE
    rack: str = DEFAULT_RACK


DEFAULT_LOCATION = Location()


def name_problem(value: Any, what: str) -> str | None:
    """Why ``value`` is not a usable zone or rack name (``what`` says which), or None if it is."""
    if not isinstance(value, str):
        return f"{what} name must be a string, got {value!r}"
    if not 1 <= len(value) <= MAX_NAME_CHARS:
        return f"{what} name must be 1 to {MAX_NAME_CHARS} characters, got {len(value)}"
    if not _NAME.fullmatch(value):
        return f"{what} name may contain only {NAME_CHARS}, got {value!r}"
    return None


def location_info(location: Location) -> dict[str, str]:
    """The registration info fields of ``location``."""
    return {ZONE_KEY: location.zone, RACK_KEY: location.rack}


def read_location(info: Mapping[str, Any] | None) -> Location:
    """The location a registration's info gives; the default for every field missing or unusable."""
    if not isinstance(info, Mapping):
        return DEFAULT_LOCATION
    zone, rack = info.get(ZONE_KEY), info.get(RACK_KEY)
    return Location(zone if name_problem(zone, "zone") is None else DEFAULT_ZONE,
                    rack if name_problem(rack, "rack") is None else DEFAULT_RACK)
