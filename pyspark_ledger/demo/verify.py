"""The demo's verdict: did every committed event come back exactly once, unaltered? Pure (numpy only).

The sink committed micro-batches ``0 .. b``; the generator had emitted event
ids ``0 .. n - 1`` by the end of batch ``b`` (``n`` = ``expected_rows``). The
rows read back from the stream are fed to a ``Tally`` as ``(event_id, intact)``
columns, in any order and any number of chunks. ``Tally.verdict()`` then says:

- ``missing``: ids in ``0 .. n - 1`` never read (data loss);
- ``duplicates``: reads of an id beyond its first (a batch committed twice);
- ``unexpected``: ids outside ``0 .. n - 1`` (rows of a batch that was not
  committed, or garbage);
- ``altered``: rows whose content is not what their id was generated with.

The check passes only if all four are zero and exactly ``n`` rows were read.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from pyspark_ledger.errors import InvalidArgumentError

MAX_EXPECTED_ROWS = 2**31 - 1


@dataclass(frozen=True)
class Verdict:
    """The outcome of the check, with every count needed to explain it."""

    expected_rows: int
    rows_read: int
    distinct_ids: int
    missing: int
    duplicates: int
    unexpected: int
    altered: int

    @property
    def passed(self) -> bool:
        return (self.rows_read == self.expected_rows and self.missing == 0 and self.duplicates == 0
                and self.unexpected == 0 and self.altered == 0)

    def problems(self) -> list[str]:
        """One plain sentence per failed condition (empty when the check passed)."""
        found = []
        if self.missing:
            found.append(f"{self.missing:,} committed events were not read back (data loss)")
        if self.duplicates:
            found.append(f"{self.duplicates:,} events were read more than once (duplicates)")
        if self.unexpected:
            found.append(f"{self.unexpected:,} rows have ids the sink never committed")
        if self.altered:
            found.append(f"{self.altered:,} rows differ from the event their id was generated with")
        if not found and self.rows_read != self.expected_rows:
            found.append(f"read {self.rows_read:,} rows but the sink committed {self.expected_rows:,}")
        return found

    def to_dict(self) -> dict:
        return dict(asdict(self), passed=self.passed)


class Tally:
    """Counts reads per event id in ``0 .. expected_rows - 1`` (4 bytes per expected event)."""

    def __init__(self, expected_rows: int) -> None:
        if not isinstance(expected_rows, int) or isinstance(expected_rows, bool) or \
                not 0 <= expected_rows <= MAX_EXPECTED_ROWS:
            raise InvalidArgumentError(
                f"expected_rows must be a whole number in 0..{MAX_EXPECTED_ROWS}, got {expected_rows!r}")
        self.expected_rows = expected_rows
        self._reads = np.zeros(expected_rows, dtype=np.uint32)
        self.rows_read = 0
        self.unexpected = 0
        self.altered = 0

    def add(self, event_ids, intact) -> None:
        """Record one chunk of rows read back: their ids and whether each row's content was intact."""
        ids = np.asarray(event_ids, dtype=np.int64)
        flags = np.asarray(intact, dtype=bool)
        if ids.shape != flags.shape or ids.ndim != 1:
            raise InvalidArgumentError(f"event_ids and intact must be 1-d and of one length, got shapes "
                                            f"{ids.shape} and {flags.shape}")
        in_range = (ids >= 0) & (ids < self.expected_rows)
        if self.expected_rows:
            self._reads += np.bincount(ids[in_range], minlength=self.expected_rows).astype(np.uint32)
        self.rows_read += int(ids.size)
        self.unexpected += int(ids.size - np.count_nonzero(in_range))
        self.altered += int(flags.size - np.count_nonzero(flags))

    def verdict(self) -> Verdict:
        distinct = int(np.count_nonzero(self._reads))
        in_range_reads = self.rows_read - self.unexpected
        return Verdict(expected_rows=self.expected_rows, rows_read=self.rows_read, distinct_ids=distinct,
                       missing=self.expected_rows - distinct, duplicates=in_range_reads - distinct,
                       unexpected=self.unexpected, altered=self.altered)
