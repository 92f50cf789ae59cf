"""What a LedgerClient shares with its writers, readers and recoveries.

The metadata store, the bookie transport, the configuration, the owned
scheduler and worker pool, the placement randomness (behind a lock, so
concurrent ensemble choices are safe), the clock, and the client's quarantine
of bookies that failed it: placement prefers bookies outside it, and takes
quarantined ones back only when nothing else is left
(``protocol.quarantine.exclusion_rounds``). When too few bookies remain the
NotEnoughBookiesError names the bookies that are unreachable or quarantined,
and why. With a zone-aware placement (the default, docs/protocol.md P1-P4) ensembles and replacements
spread over the zones and racks the bookies' registrations declare (``locations``, read with the bookie
list). Bookies whose TLS mode this client's settings cannot meet (``transport.refused()``) are never
placed, and the error names the setting to change. Owned and closed by ``LedgerClient``.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.quarantine import BookieQuarantine
from pyspark_ledger.client.scheduler import Scheduler
from pyspark_ledger.errors import InternalError, LedgerClosedError, NotEnoughBookiesError
from pyspark_ledger.metadata.bookie_location import Location
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.protocol.quarantine import exclusion_rounds
from pyspark_ledger.protocol.schedule import Quorums

if TYPE_CHECKING:  # an annotation only: the transport module imports gRPC
    from pyspark_ledger.client.transport import BookieTransport

log = logging.getLogger(__name__)


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
    clock: Callable[[], float] = time.monotonic
    quarantine: BookieQuarantine | None = None
    closed: bool = False

    def __post_init__(self) -> None:
        if self.quarantine is None:
            self.quarantine = BookieQuarantine(self.config.quarantine, clock=self.clock)

    def writable_bookies(self) -> list[str]:
        return self.transport.bookies(include_read_only=False)

    def choose_ensemble(self, size: int, exclude: Iterable[str] = (), quorums: Quorums | None = None
                        ) -> tuple[str, ...]:
        """``size`` bookies outside ``exclude``, outside the quarantine while enough others are left; spread over
        the bookies' zones for ``quorums`` (default Qw = E, Qa = majority) by a zone-aware placement (P1-P4)."""
        available = self.writable_bookies()
        locations = self.locations()
        rounds = exclusion_rounds({*exclude, *self.refused()}, (), self.quarantine.current())
        for attempt, excluded in enumerate(rounds):
            try:
                with self._rng_lock:
                    if not self._zone_aware():
                        return tuple(self.config.placement.choose_ensemble(available, size,
                                                                           tuple(sorted(excluded)), self.rng))
                    quorums = quorums or Quorums(size, size, size // 2 + 1)
                    placed = self.config.placement.place_ensemble(available, size, tuple(sorted(excluded)),
                                                                  self.rng, **self._zone_args(locations, quorums))
                return tuple(self._warned(placed, "new ensemble"))
            except NotEnoughBookiesError as exc:
                if attempt == len(rounds) - 1:
                    raise self.explained(exc, excluded) from None
        raise InternalError("exclusion_rounds returned no round")  # pragma: no cover

    def choose_replacements(self, ensemble: Sequence[str], indexes: Iterable[int],
                            exclude: Iterable[str], quorums: Quorums | None = None) -> dict[int, str]:
        """A distinct replacement for each index, outside the ensemble and ``exclude`` (placement seam); with a
        zone-aware placement, chosen so the write quorums of ``quorums`` keep their spread over zones (P1)."""
        available = self.writable_bookies()
        locations = self.locations()
        current = list(ensemble)
        excluded = set(exclude) | set(self.refused())
        chosen: dict[int, str] = {}
        try:
            with self._rng_lock:
                if self._zone_aware():
                    quorums = quorums or Quorums(len(current), len(current), 1)
                    placed = self.config.placement.place_replacements(
                        tuple(current), sorted(set(indexes)), available, tuple(sorted(excluded)), self.rng,
                        **self._zone_args(locations, quorums))
                    return dict(self._warned(placed, f"replacements for positions {sorted(set(indexes))} of "
                                                     f"{list(ensemble)}"))
                for index in sorted(set(indexes)):
                    bookie = self.config.placement.replace_bookie(tuple(current), index, available,
                                                                  tuple(sorted(excluded)), self.rng)
                    chosen[index] = current[index] = bookie
                    excluded.add(bookie)
        except NotEnoughBookiesError as exc:
            raise self.explained(exc, excluded | set(ensemble)) from None
        return chosen

    def locations(self) -> dict[str, Location]:
        """Zone and rack of the registered bookies, as the last ``writable_bookies()`` read them (P4: none known
        means every bookie is in the default zone)."""
        return getattr(self.transport, "locations", dict)()

    def _zone_aware(self) -> bool:
        return callable(getattr(self.config.placement, "place_ensemble", None))

    def _zone_args(self, locations: dict[str, Location], quorums: Quorums) -> dict:
        return {"locations": locations, "write_quorum": quorums.write_quorum, "ack_quorum": quorums.ack_quorum,
                "min_ack_zones": self.config.min_ack_quorum_zones}

    @staticmethod
    def _warned(placed, what: str):
        """The bookies of ``placed``, logging its warning (P3: the spread fell short of what was wanted)."""
        if placed.warning:
            log.warning("placement of %s: %s", what, placed.warning)
        return placed.bookies

    def refused(self) -> dict[str, str]:
        """Registered bookies this client's TLS settings cannot talk to (never placed): id -> why."""
        return getattr(self.transport, "refused", dict)()

    def explained(self, error: NotEnoughBookiesError, excluded: Iterable[str]) -> NotEnoughBookiesError:
        """``error`` with, for each excluded bookie this client saw fail, why (unreachable, quarantined)."""
        unreachable = getattr(self.transport, "unreachable", dict)()
        why = {**self.quarantine.reasons(), **unreachable}
        named = [why[bookie] if why[bookie].startswith(f"bookie {bookie} ") else f"{bookie}: {why[bookie]}"
                 for bookie in sorted(set(excluded)) if bookie in why]
        if not named:
            return error
        return NotEnoughBookiesError(f"{error}. Bookies that failed this client: {'; '.join(named)}")

    def run_in_background(self, fn: Callable[[], None]) -> Future:
        if self.closed:
            raise LedgerClosedError("the LedgerClient is closed")
        return self.workers.submit(fn)

    def close(self) -> None:
        self.closed = True
        self.scheduler.close()
        self.workers.shutdown(wait=True)
