"""What a LedgerClient shares with its writers, readers and recoveries.

The metadata store, the bookie transport, the configuration, the owned
scheduler and worker pool, and the placement randomness (behind a lock, so
concurrent ensemble choices are safe). Owned and closed by ``LedgerClient``.
"""
from __future__ import annotations

import random
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.scheduler import Scheduler
from pyspark_ledger.client.transport import BookieTransport
from pyspark_ledger.errors import LedgerClosedError
from pyspark_ledger.metadata.store import MetadataStore


@dataclass
class ClientContext:
    store: MetadataStore
    transport: BookieTransport
    config: ClientConfig
    scheduler: Scheduler = field(default_factory=Scheduler)
    workers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="ledger-metadata"))
    rng: random.Random = field(default_factory=random.Random)
    _rng_lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def writable_bookies(self) -> list[str]:
        return self.transport.bookies(include_read_only=False)

    def choose_ensemble(self, size: int, exclude: Iterable[str] = ()) -> tuple[str, ...]:
        available = self.writable_bookies()
        with self._rng_lock:
            return tuple(self.config.placement.choose_ensemble(available, size, tuple(exclude), self.rng))

    def choose_replacements(self, ensemble: Sequence[str], indexes: Iterable[int],
                            exclude: Iterable[str]) -> dict[int, str]:
        """A distinct replacement for each index, outside the ensemble and ``exclude`` (placement seam)."""
        available = self.writable_bookies()
        current = list(ensemble)
        excluded = set(exclude)
        chosen: dict[int, str] = {}
        with self._rng_lock:
            for index in sorted(set(indexes)):
                bookie = self.config.placement.replace_bookie(tuple(current), index, available,
                                                              tuple(sorted(excluded)), self.rng)
                chosen[index] = current[index] = bookie
                excluded.add(bookie)
        return chosen

    def run_in_background(self, fn: Callable[[], None]) -> Future:
        if self.closed:
            raise LedgerClosedError("the LedgerClient is closed")
        return self.workers.submit(fn)

    def close(self) -> None:
        self.closed = True
        self.scheduler.close()
        self.workers.shutdown(wait=True)
