"""Unique 64-bit ledger ids from ZooKeeper.

An id is ``high << 31 | seq``. ``seq`` is the sequence number ZooKeeper gives
a sequential znode created (then deleted) under ``/idgen/<high>``: it is that
directory's child-version counter, strictly increasing, so no two creations
under one directory get the same number. That counter is a signed 32-bit
integer and would wrap, so once a number reaches ``roll_at`` (2**30) the
durable high part stored in ``/idgen`` is bumped by compare-and-set and later
ids come from the next directory. Numbers below 2**31 are always valid even
from a client still using an old ``high``; a wrapped (negative) number is never
used. ``high`` may grow to 2**32 - 1, so ids stay below 2**63.
"""
from __future__ import annotations

import threading

from pyspark_ledger.errors import InvalidArgumentError, MetadataError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.metadata import layout
from pyspark_ledger.metadata.zk_session import ZooKeeperSession

SEQ_BITS = 31
ROLL_AT = 2**30
MAX_HIGH = 2**32 - 1
_PREFIX = "id-"


class ZooKeeperIdGenerator:
    """Hands out ledger ids unique across every client of one chroot."""

    def __init__(self, session: ZooKeeperSession, roll_at: int = ROLL_AT) -> None:
        if not 0 < roll_at <= ROLL_AT:
            raise InvalidArgumentError(f"roll_at must be in 1..{ROLL_AT}, got {roll_at}")
        self._session = session
        self._roll_at = roll_at
        self._lock = threading.Lock()
        self._high: int | None = None

    def next_id(self) -> int:
        while True:
            high = self._current_high()
            seq = self._take_sequence(high)
            if seq >= self._roll_at or seq < 0:
                self._bump_high(high)
            if 0 <= seq < 2**SEQ_BITS:
                return high << SEQ_BITS | seq

    def _take_sequence(self, high: int) -> int:
        client = self._session.client
        path = self._session.call("generate a ledger id", client.create_async,
                                  f"{layout.idgen_bucket(high)}/{_PREFIX}", b"", ephemeral=True,
                                  sequence=True, makepath=True)
        self._session.call("generate a ledger id", client.delete_async, path,
                           missing=NoSuchKeyError(path))
        return int(path.rsplit("/", 1)[1][len(_PREFIX):])  # "-2147483648" once wrapped

    def _current_high(self) -> int:
        with self._lock:
            if self._high is None:
                self._high = self._read_high()[0]
            return self._high

    def _read_high(self) -> tuple[int, int]:
        data, stat = self._session.call("read the ledger id counter", self._session.client.get_async,
                                        layout.IDGEN)
        try:
            return (int(data) if data else 0), stat.version
        except ValueError as exc:
            raise MetadataError(f"{layout.IDGEN} in {self._session.uri} holds {data!r}, "
                                "not a number; restore it to the highest id bucket") from exc

    def _bump_high(self, seen: int) -> None:
        """Move every client past bucket ``seen`` (compare-and-set; idempotent)."""
        while True:
            high, version = self._read_high()
            if high <= seen:
                if seen + 1 > MAX_HIGH:
                    raise MetadataError(f"ledger ids of {self._session.uri} are exhausted")
                try:
                    self._session.call("advance the ledger id counter", self._session.client.set_async,
                                       layout.IDGEN, str(seen + 1).encode(), version)
                except MetadataVersionConflictError:
                    continue
                high = seen + 1
            with self._lock:
                self._high = max(self._high or 0, high)
            return
