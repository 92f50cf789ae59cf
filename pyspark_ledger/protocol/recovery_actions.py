"""The actions the recovery state machine asks its caller to perform.

Each is a small immutable value; ``LedgerRecovery`` returns tuples of them
and the I/O layer executes them, feeding the answers back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from pyspark_ledger.errors import RecoveryError
from pyspark_ledger.metadata.model import LedgerMetadata


@dataclass(frozen=True, slots=True)
class FenceAndReadLac:
    """Read the LAC of the ledger from each of ``targets`` with the fence flag set."""

    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadEntry:
    """Read ``entry_id`` from each of ``targets`` (in parallel), fencing if ``fence``."""

    entry_id: int
    targets: tuple[str, ...]
    fence: bool


@dataclass(frozen=True, slots=True)
class WriteBack:
    """Add ``body`` (the encoded entry, as read) to ``targets`` with the recovery flag."""

    entry_id: int
    body: bytes
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChooseReplacements:
    """Pick bookies for ``failed`` (index -> bookie) outside ``ensemble`` and ``exclude``
    (every bookie whose write-back failed so far); answer with ``on_replacements``
    or ``on_replacement_failure``."""

    failed: Mapping[int, str]
    ensemble: tuple[str, ...]
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CloseLedger:
    """CAS ``metadata`` (CLOSED) against the version recovery started from."""

    metadata: LedgerMetadata


@dataclass(frozen=True, slots=True)
class RecoveryFailed:
    """Recovery stopped without closing the ledger; ``reason`` says why."""

    reason: str

    def error(self) -> RecoveryError:
        return RecoveryError(self.reason)


Action = Union[FenceAndReadLac, ReadEntry, WriteBack, ChooseReplacements, CloseLedger, RecoveryFailed]
