"""A MetadataStore wrapper that lets tests intercept compare-and-sets and records every ledger version.

``HookedStore(real_store)`` forwards everything to the real store (SQLite or
ZooKeeper). ``before_write(fn)`` registers ``fn(metadata, expected_version)``
to run just before each ``write_ledger`` -- a test can block there (an
Event) or change the ledger through another client to script a lost CAS
(docs/protocol.md W5, C3). ``history[ledger_id]`` lists every version stored through this
wrapper, in order, for fragment and state invariants.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Mapping

from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.store import BookieRegistration, MetadataStore, Registration, Versioned, Watch

WriteHook = Callable[[LedgerMetadata, int], None]


class HookedStore(MetadataStore):
    """Forwards to ``inner``; see the module docstring."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.history: dict[int, list[LedgerMetadata]] = {}
        self._hooks: list[WriteHook] = []
        self._lock = threading.Lock()

    def before_write(self, hook: WriteHook) -> Callable[[], None]:
        """Run ``hook`` before every ledger write; returns a function that removes it."""
        with self._lock:
            self._hooks.append(hook)
        return lambda: self._remove(hook)

    def _remove(self, hook: WriteHook) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def _record(self, metadata: LedgerMetadata) -> None:
        with self._lock:
            self.history.setdefault(metadata.ledger_id, []).append(metadata)

    # --- ledgers ------------------------------------------------------------
    def new_ledger_id(self) -> int:
        return self.inner.new_ledger_id()

    def create_ledger(self, metadata: LedgerMetadata) -> int:
        version = self.inner.create_ledger(metadata)
        self._record(metadata)
        return version

    def read_ledger_latest(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        return self.inner.read_ledger_latest(ledger_id)  # ZooKeeper syncs first; the base would not

    def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        return self.inner.read_ledger(ledger_id)

    def write_ledger(self, metadata: LedgerMetadata, expected_version: int) -> int:
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            hook(metadata, expected_version)
        version = self.inner.write_ledger(metadata, expected_version)
        self._record(metadata)
        return version

    def delete_ledger(self, ledger_id: int, expected_version: int | None = None) -> None:
        self.inner.delete_ledger(ledger_id, expected_version)

    def list_ledgers(self) -> Iterator[int]:
        return self.inner.list_ledgers()

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[Versioned[LedgerMetadata] | None], None]) -> Watch:
        return self.inner.watch_ledger(ledger_id, callback)

    # --- bookies ------------------------------------------------------------
    def register_bookie(self, bookie_id: str, info: Mapping[str, Any] | None = None,
                        read_only: bool = False) -> Registration:
        return self.inner.register_bookie(bookie_id, info, read_only)

    def bookies(self, include_read_only: bool = True) -> dict[str, BookieRegistration]:
        return self.inner.bookies(include_read_only)

    def watch_bookies(self, callback: Callable[[dict[str, BookieRegistration]], None]) -> Watch:
        return self.inner.watch_bookies(callback)

    # --- keys ---------------------------------------------------------------
    def get(self, key: str) -> Versioned[bytes]:
        return self.inner.get(key)

    def create(self, key: str, value: bytes) -> int:
        return self.inner.create(key, value)

    def set(self, key: str, value: bytes, expected_version: int) -> int:
        return self.inner.set(key, value, expected_version)

    def delete(self, key: str, expected_version: int | None = None) -> None:
        self.inner.delete(key, expected_version)

    def children(self, key: str) -> list[str]:
        return self.inner.children(key)

    def close(self) -> None:
        self.inner.close()
