"""The metadata store interface: one contract, two backends.

``zk://host:port[,host:port]/chroot`` is ZooKeeper through kazoo (clusters);
``sqlite:///abs/path/metadata.db`` is an embedded file that several processes
on one machine can share. Both offer the same operations with the same
semantics, checked by one contract test suite (tests/metadata/).

Versions: every stored value has an integer version, 0 when created and
incremented by each successful write. A compare-and-set whose expected version
is not the stored one raises ``MetadataVersionConflictError``.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

from pyspark_ledger.metadata.model import LedgerMetadata

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    value: T
    version: int


@dataclass(frozen=True, slots=True)
class BookieRegistration:
    """A live bookie as the metadata store sees it."""

    bookie_id: str
    read_only: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


class Watch(abc.ABC):
    """A change subscription; ``cancel()`` stops callbacks (idempotent)."""

    @abc.abstractmethod
    def cancel(self) -> None: ...


class Registration(abc.ABC):
    """A bookie's liveness in the store: an ephemeral znode or a heartbeat lease.

    It stays alive until ``close()`` (or until the process dies and the session
    or lease expires). ``set_read_only`` moves it between writable and read-only.
    """

    bookie_id: str

    @abc.abstractmethod
    def set_read_only(self, read_only: bool) -> None: ...

    @abc.abstractmethod
    def update_info(self, info: Mapping[str, Any]) -> None:
        """Replace the info published with the registration (e.g. refreshed disk space); MetadataError if the
        registration is closed or lost, InvalidArgumentError if ``info`` is not JSON or too large."""

    @abc.abstractmethod
    def close(self) -> None: ...


class MetadataStore(abc.ABC):
    """Ledger metadata, bookie registrations and versioned keys, with CAS."""

    uri: str

    # --- ledgers ------------------------------------------------------------
    @abc.abstractmethod
    def new_ledger_id(self) -> int:
        """A ledger id never returned before by this store (64-bit, >= 0)."""

    @abc.abstractmethod
    def create_ledger(self, metadata: LedgerMetadata) -> int:
        """Store new metadata; returns its version (0). MetadataExistsError if taken."""

    @abc.abstractmethod
    def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """NoSuchLedgerError if absent."""

    def read_ledger_latest(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """As ``read_ledger``, but seeing every write that completed before the call, on any client of the
        store (a replicated store first catches the server it reads from up with its leader)."""
        return self.read_ledger(ledger_id)

    @abc.abstractmethod
    def write_ledger(self, metadata: LedgerMetadata, expected_version: int) -> int:
        """Compare-and-set; returns the new version.

        MetadataVersionConflictError on a stale version, NoSuchLedgerError if deleted.
        """

    @abc.abstractmethod
    def delete_ledger(self, ledger_id: int, expected_version: int | None = None) -> None:
        """NoSuchLedgerError if absent; a version conflict if expected_version is stale."""

    @abc.abstractmethod
    def list_ledgers(self) -> Iterator[int]:
        """All ledger ids, ascending."""

    @abc.abstractmethod
    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[Versioned[LedgerMetadata] | None], None]) -> Watch:
        """Call back (from a background thread) on every change; None once deleted."""

    # --- bookies ------------------------------------------------------------
    @abc.abstractmethod
    def register_bookie(self, bookie_id: str, info: Mapping[str, Any] | None = None,
                        read_only: bool = False) -> Registration:
        """Announce a live bookie. Waits (bounded) for a dead predecessor's
        registration with the same id to expire; MetadataExistsError if a live
        one holds the id."""

    @abc.abstractmethod
    def bookies(self, include_read_only: bool = True) -> dict[str, BookieRegistration]:
        """The live bookies by id."""

    @abc.abstractmethod
    def watch_bookies(self, callback: Callable[[dict[str, BookieRegistration]], None]) -> Watch:
        """Call back with the new set whenever bookies come, go or change mode."""

    # --- versioned keys (streams, cookies, ...) -----------------------------
    @abc.abstractmethod
    def get(self, key: str) -> Versioned[bytes]:
        """NoSuchKeyError if absent. Keys are '/'-separated relative paths."""

    @abc.abstractmethod
    def create(self, key: str, value: bytes) -> int:
        """MetadataExistsError if present; creates missing parents implicitly."""

    @abc.abstractmethod
    def set(self, key: str, value: bytes, expected_version: int) -> int:
        """Compare-and-set; MetadataVersionConflictError / NoSuchKeyError."""

    @abc.abstractmethod
    def delete(self, key: str, expected_version: int | None = None) -> None:
        """NoSuchKeyError if absent."""

    @abc.abstractmethod
    def children(self, key: str) -> list[str]:
        """Names (not paths) of the direct children of key, sorted; [] if none."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and stop background threads (idempotent)."""

    def __enter__(self) -> "MetadataStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
