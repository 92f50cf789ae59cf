"""Who may create a ledger on this bookie: a first add or fence of a ledger it has no state for.

Ledger ids are sequential, so anyone can guess the next ones. A bookie creates
state for a ledger it has never seen on a first add, and (docs/protocol.md F4: a
recoverer must be able to fence a bookie the writer never reached) on a
fence, keeping the key that came with it. Without a check, a caller who fences
or adds the next ids first, with any key, locks the legitimate writer out
(UNAUTHORIZED). So, for a ledger the bookie has no state for, ``LedgerGuard``
asks the metadata store first:

* the ledger's metadata is absent: NO_SUCH_LEDGER, nothing is stored (absent twice: the second read,
  ``read_ledger_latest``, first catches a ZooKeeper server up with its leader, so a ledger a client
  created through another server a moment ago is found);
* the store cannot be read: IO_ERROR (an unknown outcome, never a negative);
* the metadata carries a ``master_key_check`` (clients since issue 12): the
  key must match it, else UNAUTHORIZED; metadata from older clients has none
  and the existence of the ledger is enough.

The decision is the pure ``decide``. Lookups run on the caller's thread, off
the storage lock, and only for ledgers the bookie has no state for (a ledger
it stores never costs a lookup); the metadata of admitted ledgers is cached
(bounded, least recently used first out). Absence is never cached: a ledger
created a moment later must work at once. At most ``max_lookups`` lookups
run at once (a flood of made-up ids must not become a flood on the metadata
store); past that, and after waiting ``LOOKUP_WAIT_S``, the answer is
TOO_MANY_REQUESTS.
"""
from __future__ import annotations

import logging
import operator
import threading
from collections import OrderedDict
from typing import Callable

from pyspark_ledger.errors import NoSuchLedgerError
from pyspark_ledger.metadata.model import master_key_matches
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

log = logging.getLogger(__name__)
DEFAULT_CACHE_SIZE = 4096
DEFAULT_MAX_LOOKUPS = 8
LOOKUP_WAIT_S = 1.0
UNREACHABLE = object()  # what a lookup returns when the metadata store could not answer
BUSY = object()  # no lookup was made: too many in flight
_LEDGER = operator.itemgetter(0)  # of an add tuple


def decide(found: object, master_key: bytes) -> int:
    """The status for a first add/fence of a ledger the bookie has no state for.

    ``found`` is None (metadata absent), UNREACHABLE, or the ledger's ``master_key_check`` ("" if its
    metadata has none)."""
    if found is UNREACHABLE:
        return pb.IO_ERROR
    if found is BUSY:
        return pb.TOO_MANY_REQUESTS
    if found is None:
        return pb.NO_SUCH_LEDGER
    if found == "":
        return pb.OK  # created by an older client: existence is all there is to check
    return pb.OK if master_key_matches(bytes(master_key), found) else pb.UNAUTHORIZED


def explain(status: int, ledger_id: int, bookie_id: str) -> str:
    if status == pb.NO_SUCH_LEDGER:
        return (f"ledger {ledger_id} does not exist in the metadata store: bookie {bookie_id} creates no "
                "state for it (create the ledger first)")
    if status == pb.UNAUTHORIZED:
        return f"master key does not match the metadata of ledger {ledger_id}: nothing stored"
    if status == pb.TOO_MANY_REQUESTS:
        return (f"bookie {bookie_id} is checking too many unknown ledgers against the metadata store; "
                f"ledger {ledger_id} was not checked: retry")
    if status == pb.IO_ERROR:
        return (f"bookie {bookie_id} cannot read the metadata of ledger {ledger_id} to check a first add or "
                "fence: outcome unknown, retry")
    return ""


def metadata_lookup(store) -> Callable[[int], object]:
    """A lookup over a MetadataStore: the ledger's master_key_check, None if absent, UNREACHABLE on error."""
    def lookup(ledger_id: int) -> object:
        try:
            try:
                return store.read_ledger(ledger_id).value.master_key_check
            except NoSuchLedgerError:  # a replicated store's server may lag: absence only after catching up
                return store.read_ledger_latest(ledger_id).value.master_key_check
        except NoSuchLedgerError:
            return None
        except Exception as exc:  # noqa: BLE001 - unreachable or unreadable: an unknown outcome
            log.warning("cannot read the metadata of ledger %d: %s", ledger_id, exc)
            return UNREACHABLE
    return lookup


class LedgerGuard:
    """Checks first adds and fences of ledgers the bookie has no state for (see the module docstring)."""

    def __init__(self, lookup: Callable[[int], object], has_ledger: Callable[[int], bool], bookie_id: str,
                 cache_size: int = DEFAULT_CACHE_SIZE, max_lookups: int = DEFAULT_MAX_LOOKUPS) -> None:
        self._lookup = lookup
        self._has_ledger = has_ledger
        self._bookie_id = bookie_id
        self._cache: OrderedDict[int, str] = OrderedDict()
        self._cache_size = max(1, cache_size)
        self._lock = threading.Lock()
        self._lookups = threading.BoundedSemaphore(max(1, max_lookups))

    def check(self, ledger_id: int, master_key: bytes) -> tuple[int, str]:
        """(status, message) for creating ``ledger_id`` here with ``master_key``; OK with "" when allowed."""
        status = decide(self._found(ledger_id), master_key)
        return status, explain(status, ledger_id, self._bookie_id)

    def _found(self, ledger_id: int) -> object:
        """The ledger's master_key_check (cached), None if absent, UNREACHABLE if the store did not answer."""
        with self._lock:
            found = self._cache.get(ledger_id)
            if found is not None:
                self._cache.move_to_end(ledger_id)
                return found
        if not self._lookups.acquire(timeout=LOOKUP_WAIT_S):
            return BUSY
        try:
            found = self._lookup(ledger_id)  # off every lock: the store may be slow
        finally:
            self._lookups.release()
        if isinstance(found, str):
            with self._lock:
                self._cache[ledger_id] = found
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return found

    def check_fence(self, ledger_id: int, master_key: bytes) -> tuple[int, str]:
        """A fence: OK at once if the bookie has the ledger (storage then checks the key itself)."""
        if self._has_ledger(ledger_id):
            return pb.OK, ""
        return self.check(ledger_id, master_key)

    def filter_adds(self, ops: list[tuple], refused: list) -> list[tuple]:
        """The adds that may go to storage; those of unknown ledgers that fail the check go to ``refused`` as
        (ledger id, entry id, status, message). One set of ledger ids per batch when all are known."""
        has_ledger = self._has_ledger
        unknown = {ledger_id for ledger_id in set(map(_LEDGER, ops)) if not has_ledger(ledger_id)}
        if not unknown:
            return ops
        found = {ledger_id: self._found(ledger_id) for ledger_id in unknown}  # one lookup per unknown ledger
        verdicts: dict[tuple[int, bytes], int] = {}
        kept = []
        for op in ops:
            ledger_id = op[0]
            if ledger_id in unknown:
                pair = (ledger_id, bytes(op[2]))
                status = verdicts.get(pair)
                if status is None:
                    status = verdicts[pair] = decide(found[ledger_id], pair[1])
                if status != pb.OK:
                    refused.append((ledger_id, op[1], status, explain(status, ledger_id, self._bookie_id)))
                    continue
            kept.append(op)
        return kept
