"""Which seeds a fault test runs, from the environment: ``LEDGER_JEPSEN_SEED=S`` replays S alone;
``LEDGER_JEPSEN_SCHEDULES=N`` runs seeds 1..N; neither runs the test's default count."""
from __future__ import annotations

import os

from pyspark_ledger.errors import InvalidArgumentError


def seeds_from_env(default: int, limit: int) -> list[int]:
    """The seeds to run: see the module docstring; ``LEDGER_JEPSEN_SCHEDULES`` must be within 1..``limit``."""
    if os.environ.get("LEDGER_JEPSEN_SEED"):
        return [int(os.environ["LEDGER_JEPSEN_SEED"])]
    count = int(os.environ.get("LEDGER_JEPSEN_SCHEDULES", str(default)))
    if not 1 <= count <= limit:
        raise InvalidArgumentError(f"LEDGER_JEPSEN_SCHEDULES must be in 1..{limit}, got {count}")
    return list(range(1, count + 1))
