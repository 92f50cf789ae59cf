"""The storage's last-add-confirmed (LAC) board: long polls waiting for a ledger's LAC to pass a value, and
explicit LAC writes (``WriteLac``) that raise it.

Every method runs with the storage's lock held (the board's Conditions are
built on that lock), so a LAC stored with an entry and a LAC written
explicitly wake the same waiters. An explicit LAC is kept in memory only:
after a restart the LAC is what the stored entries (or a later checkpoint)
carried.
"""
from __future__ import annotations

import hmac
import threading
from typing import Callable, Iterable

from bookie_server.ledger_state import LedgerStates
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


class LacBoard:
    """Long polls on the LAC of the ledgers in ``states``, under the storage's ``lock`` (see the module docstring)."""

    def __init__(self, lock: threading.Lock, states: LedgerStates) -> None:
        self._lock = lock
        self._states = states
        self._waiters: dict[int, list] = {}  # ledger id -> [Condition, waiter count]

    def polled(self, ledger_id: int) -> bool:
        """Whether a long poll waits on the ledger now."""
        return ledger_id in self._waiters

    def wait(self, ledger_id: int, previous_lac: int, timeout_s: float, closed: Callable[[], bool]) -> None:
        """Block (releasing the lock) until the ledger's LAC > ``previous_lac``, ``closed()``, or the timeout."""
        waiter = self._waiters.setdefault(ledger_id, [threading.Condition(self._lock), 0])
        waiter[1] += 1
        try:
            waiter[0].wait_for(lambda: closed() or self._above(ledger_id, previous_lac),
                               min(max(0.0, timeout_s), threading.TIMEOUT_MAX))
        finally:
            waiter[1] -= 1
            if waiter[1] == 0:
                del self._waiters[ledger_id]

    def advanced(self, ledger_ids: Iterable[int]) -> None:
        """Wake the long polls of ledgers whose LAC moved (entries stored with a higher LAC)."""
        for ledger_id in set(ledger_ids).intersection(self._waiters):
            self._waiters[ledger_id][0].notify_all()

    def wake_all(self) -> None:
        """Wake every long poll (the storage closes: they answer with what they have)."""
        for waiter in self._waiters.values():
            waiter[0].notify_all()

    def write(self, ledger_id: int, master_key: bytes, last_add_confirmed: int) -> int:
        """Keep max(current, given) as the ledger's LAC and wake its long polls: OK, NO_SUCH_LEDGER or
        UNAUTHORIZED. A fenced ledger accepts it: the value only names entries its writer already confirmed."""
        record = self._states.get(ledger_id)
        if record is None:
            return pb.NO_SUCH_LEDGER
        if not hmac.compare_digest(record.master_key, bytes(master_key)):
            return pb.UNAUTHORIZED
        if last_add_confirmed > record.last_add_confirmed:
            record.last_add_confirmed = last_add_confirmed
            self.advanced((ledger_id,))
        return pb.OK

    def _above(self, ledger_id: int, previous_lac: int) -> bool:
        record = self._states.get(ledger_id)
        return record is not None and record.last_add_confirmed > previous_lac
