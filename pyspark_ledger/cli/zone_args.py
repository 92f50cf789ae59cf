"""``--min-ack-quorum-zones M``: the client's ``min_ack_quorum_zones`` on the commands that place bookies (new
ledgers, ensemble changes, recovery write-back, re-replication; docs/protocol.md P1-P3).

M is a whole number from 1 (the default: best spread, a warning when it falls short) to
``MAX_ACK_ZONES``; M >= 2 refuses any ensemble or replacement where some ack quorum could lie in fewer
than M zones. A command that knows the ack quorum it writes with checks M against it before anything is
made (``check_against_ack``): an ack quorum of Qa bookies spans at most Qa zones.
"""
from __future__ import annotations

import argparse

from pyspark_ledger.arg_types import number
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.protocol.zone_placement import MAX_ACK_ZONES

FLAG = "--min-ack-quorum-zones"

_zones = number(int, lambda value: 1 <= value <= MAX_ACK_ZONES,
                f"must be a whole number from 1 (no demand) to {MAX_ACK_ZONES}")


def add_zone_arg(parser: argparse.ArgumentParser, ack_flag: str | None = None) -> None:
    limit = f"; at most the ack quorum ({ack_flag})" if ack_flag else ""
    parser.add_argument(FLAG, dest="min_ack_quorum_zones", type=_zones, default=1, metavar="M",
                        help=f"zones every ack quorum must span, 1 to {MAX_ACK_ZONES}{limit}: with M >= 2 an ensemble "
                             "or replacement whose ack quorums could lie in fewer zones is refused (bookies declare "
                             "zones with bookie-server --zone; docs/protocol.md P2). Default 1: the best spread "
                             "available, a warning when it falls short")


def check_against_ack(zones: int, ack_quorum: int, ack_flag: str) -> None:
    """InvalidConfigurationError when ``zones`` exceeds the ack quorum the command writes with."""
    if zones > ack_quorum:
        raise InvalidConfigurationError(
            f"{FLAG} {zones} cannot be met with {ack_flag} {ack_quorum}: an ack quorum of {ack_quorum} bookie(s) "
            f"spans at most {ack_quorum} zone(s) (docs/protocol.md P2); give {FLAG} {ack_quorum} or less, or a "
            f"larger {ack_flag}")
