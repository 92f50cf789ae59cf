"""Round-robin distribution schedule: which bookies of an ensemble store an entry.

docs/protocol.md Q2: the write quorum of entry ``e`` is the Qw-long
subsequence of the ensemble starting at index ``e % E``, wrapping around, so
entry ``e`` goes to ``ensemble[(e + i) % E]`` for ``i < Qw``. There are only E
distinct write quorums in an ensemble, and only one when Qw = E.

Everything here works on bookie *indexes* into an ensemble; ``write_set_bookies``
maps them to bookie ids. Pure functions, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata.model import LedgerMetadata, check_quorums


@dataclass(frozen=True, slots=True)
class Quorums:
    """E, Qw and Qa of a ledger, validated (E >= Qw >= Qa >= 1)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int

    def __post_init__(self) -> None:
        check_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)

    @classmethod
    def of(cls, metadata: LedgerMetadata) -> "Quorums":
        return cls(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)

    @property
    def coverage_threshold(self) -> int:
        """Qw - Qa + 1: answers needed from a write set so no ack quorum is unheard."""
        return self.write_quorum - self.ack_quorum + 1

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        return write_set(entry_id, self.ensemble_size, self.write_quorum)


def check_entry_id(entry_id: int) -> int:
    """Return ``entry_id`` if it is an int >= 0, else raise naming the value."""
    if not isinstance(entry_id, int) or isinstance(entry_id, bool) or entry_id < 0:
        raise InvalidArgumentError(f"entry id must be an integer >= 0, got {entry_id!r}")
    return entry_id


def check_bookie_index(bookie_index: int, ensemble_size: int) -> int:
    """Return ``bookie_index`` if it indexes an ensemble of ``ensemble_size``."""
    if not isinstance(bookie_index, int) or isinstance(bookie_index, bool) or not (
        0 <= bookie_index < ensemble_size
    ):
        raise InvalidArgumentError(
            f"bookie index must be in 0..{ensemble_size - 1} for an ensemble of {ensemble_size},"
            f" got {bookie_index!r}"
        )
    return bookie_index


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Indexes of the bookies that store ``entry_id``, in write-set order.

    Q2: ``ensemble[(entry_id + i) % E] for i < Qw``.
    """
    check_entry_id(entry_id)
    check_quorums(ensemble_size, write_quorum, 1)
    start = entry_id % ensemble_size
    return tuple((start + i) % ensemble_size for i in range(write_quorum))


def is_in_write_set(entry_id: int, bookie_index: int, ensemble_size: int, write_quorum: int) -> bool:
    """Whether the bookie at ``bookie_index`` is in the write set of ``entry_id``."""
    check_bookie_index(bookie_index, ensemble_size)
    offset = (bookie_index - entry_id % ensemble_size) % ensemble_size
    return offset < write_quorum


def all_write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The E write sets of an ensemble, the one starting at index i in position i."""
    return tuple(write_set(start, ensemble_size, write_quorum) for start in range(ensemble_size))


def distinct_write_sets(ensemble_size: int, write_quorum: int) -> tuple[frozenset[int], ...]:
    """The distinct write quorums as sets: E of them when Qw < E, one when Qw = E."""
    seen: dict[frozenset[int], None] = {}
    for members in all_write_sets(ensemble_size, write_quorum):
        seen.setdefault(frozenset(members), None)
    return tuple(seen)


def write_set_bookies(entry_id: int, ensemble: Sequence[str], write_quorum: int) -> tuple[str, ...]:
    """Bookie ids storing ``entry_id`` in ``ensemble``, in write-set order."""
    return tuple(ensemble[index] for index in write_set(entry_id, len(ensemble), write_quorum))
