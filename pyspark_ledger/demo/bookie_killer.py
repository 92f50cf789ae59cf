"""Kill one bookie (SIGKILL) at a moment when a writer certainly has adds it has not acknowledged.

A kill makes an ensemble change only if the killed bookie still owes a writer
acknowledgements (or the writer adds to its ledger later): a ledger whose
entries the bookie has all acknowledged just closes (docs/protocol.md W2). The
sink's writers send a task's entries in bursts, as many as their in-flight
budget allows, so how far a ledger's last add confirmed has got says little
about what its writer still has to send. So the demo does not guess; it proves:

1. ``choose_victim``: the live bookie in the current ensemble of the most OPEN
   ledgers of the stream (ties go to the newest ledger);
2. pause it (SIGSTOP). From now on it acknowledges nothing, while the other two
   bookies of each write set (Qa = 2) go on confirming. The ledgers that exist
   just after the pause are listed;
3. wait for proof (``proving_ledger``, the metadata looked at every
   ``PROOF_POLL_S``): an OPEN ledger of the stream that is not in that list (so
   it began after the pause) with the victim in its current ensemble. The
   victim can have acknowledged none of its entries, and its writer, a sink
   task that has just begun, has its rows still to write;
4. kill it (SIGKILL) at once. The writer's adds outstanding at the victim, and
   every add it sends later, fail and the writer replaces it: an ensemble
   change. The ledger's metadata is read once more afterwards: still OPEN
   shows the writer had not finished when the kill landed. If no entry of it
   was confirmed yet, the writer rewrites the fragment in place instead of
   starting a new one (``stream_layout`` finds that change from the fragment
   the kill recorded).

A paused bookie's registration lapses after the metadata lease (3 s in the
sandbox) and new ensembles then leave it out, so a pause that found no proof
within ``PROOF_WINDOW_S`` is continued (SIGCONT) and tried again after
``RESUMED_S``. A victim that holds the SQLite metadata file's write lock when
paused is continued at once (every metadata change on the host would wait for
it). A victim still paused when the stream ends is killed without proof
(``finish``), and the kill says so; ``release`` continues it if the demo stops
early.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Sequence

from pyspark_ledger.demo.stream_layout import partition_of
from pyspark_ledger.errors import LedgerError, NoSuchLedgerError
from pyspark_ledger.log.ledgers import STREAM_TAG
from pyspark_ledger.metadata.model import OPEN, LedgerMetadata
from pyspark_ledger.metadata.sqlite_lock_holder import write_lock_holder
from pyspark_ledger.metadata.uri import SqliteTarget, parse_metadata_uri

PROOF_WINDOW_S = 2.0
PROOF_POLL_S = 0.02
RESUMED_S = 1.0
LOCK_RETRY_S = 0.05


@dataclass(frozen=True)
class Victim:
    """The bookie to pause and kill, the newest OPEN ledger it serves, and how many OPEN ledgers it serves."""

    bookie_id: str
    ledger_id: int
    partition: int | None
    open_ledgers: int


@dataclass(frozen=True)
class Kill:
    """A bookie killed by the demo, and the ledger that proved a writer had adds outstanding at it."""

    bookie_index: int
    bookie_id: str
    pid: int | None
    ledger_id: int | None  # the proving ledger (None: killed without proof, see ``proven``)
    partition: int | None
    open_ledgers: int  # OPEN ledgers of the stream with the bookie in their current ensemble, at the kill
    at_s: float  # seconds after the streaming query started
    paused_s: float = 0.0  # how long it was paused (SIGSTOP) before the kill
    proven: bool = True  # False: killed when the stream ended, before any proof
    first_entry_id: int | None = None  # the proving ledger's current fragment at the kill: its first entry
    ensemble: tuple[str, ...] = ()  # and its bookies

    @property
    def seen_fragment(self) -> tuple[int, int, tuple[str, ...]] | None:
        """``(ledger id, first entry id, ensemble)`` of the fragment the kill hit (``summarize_ledgers``'s
        ``seen``: a change before its first confirmed entry rewrites it in place), or None."""
        if self.ledger_id is None or self.first_entry_id is None:
            return None
        return self.ledger_id, self.first_entry_id, tuple(self.ensemble)

    def to_dict(self) -> dict:
        return asdict(self)


def choose_victim(candidates: Sequence[LedgerMetadata], alive: Sequence[str]) -> Victim | None:
    """The live bookie in the current ensemble of the most candidate ledgers (see the module docstring)."""
    newest_first = sorted(candidates, key=lambda metadata: metadata.ledger_id, reverse=True)
    serves: dict[str, list[LedgerMetadata]] = {}
    for metadata in newest_first:
        for bookie in metadata.current_fragment.bookies:
            if bookie in alive:
                serves.setdefault(bookie, []).append(metadata)
    if not serves:
        return None
    rank = {bookie: position for position, bookie in enumerate(alive)}
    bookie = max(serves, key=lambda b: (len(serves[b]), serves[b][0].ledger_id, -rank[b]))
    newest = serves[bookie][0]
    return Victim(bookie, newest.ledger_id, partition_of(newest), len(serves[bookie]))


def proving_ledger(victim: str, existed: set[int], open_ledgers: Sequence[LedgerMetadata]) -> LedgerMetadata | None:
    """The newest OPEN ledger begun after the pause (not in ``existed``) with ``victim`` in its current
    ensemble; None if there is none yet."""
    for metadata in sorted(open_ledgers, key=lambda metadata: metadata.ledger_id, reverse=True):
        if metadata.ledger_id not in existed and victim in metadata.current_fragment.bookies:
            return metadata
    return None


@dataclass
class _Pause:
    index: int
    bookie_id: str
    pid: int | None
    since: float  # time.monotonic()
    existed: set[int]


class BookieKiller:
    """Pauses, proves and kills through the sandbox (see the module docstring); ``step`` once per tick."""

    def __init__(self, sandbox, client, stream: str) -> None:
        self._sandbox = sandbox
        self._client = client
        self._tag = stream.encode()
        self._done: set[int] = set()  # closed, or of another stream: never looked at again
        self._pause: _Pause | None = None
        self._next_pause = 0.0
        self._pauses = 0
        target = parse_metadata_uri(sandbox.metadata_uri)
        self._sqlite_path = target.path if isinstance(target, SqliteTarget) else None

    @property
    def pauses(self) -> int:
        """How many times a victim was paused (each pause that found no proof was continued)."""
        return self._pauses

    @property
    def paused(self) -> bool:
        """True while a victim is paused (``step`` then polls for proof itself: no need to sleep between)."""
        return self._pause is not None

    def open_ledgers(self) -> list[LedgerMetadata]:
        """The stream's ledgers being written now."""
        found = []
        for ledger_id in self._client.list_ledgers():
            if ledger_id in self._done:
                continue
            try:
                metadata = self._client.ledger_metadata(ledger_id)
            except NoSuchLedgerError:
                self._done.add(ledger_id)
                continue
            if metadata.custom_metadata.get(STREAM_TAG) != self._tag or metadata.state != OPEN:
                self._done.add(ledger_id)
            else:
                found.append(metadata)
        return found

    def step(self, at_s: float, budget_s: float = 0.2) -> Kill | None:
        """Pause a victim, or look for proof (for up to ``budget_s``) and kill it; None while there is
        nothing to kill yet."""
        now = time.monotonic()
        if self._pause is None:
            if now >= self._next_pause:
                self._begin_pause(now)
            return None
        until = now + budget_s
        while True:
            ledgers = self.open_ledgers()
            metadata = proving_ledger(self._pause.bookie_id, self._pause.existed, ledgers)
            if metadata is not None:
                return self._kill(at_s + time.monotonic() - now, ledgers, metadata)
            if time.monotonic() - self._pause.since >= PROOF_WINDOW_S:
                self._continue(time.monotonic() + RESUMED_S)
                return None
            if time.monotonic() + PROOF_POLL_S > until:
                return None
            time.sleep(PROOF_POLL_S)

    def finish(self, at_s: float) -> Kill | None:
        """The stream has ended: kill a victim still paused, without proof; None if none is paused."""
        if self._pause is None:
            return None
        return self._kill(at_s, self.open_ledgers(), None)

    def release(self) -> None:
        """Continue a paused victim (the demo is stopping early); nothing if none is paused."""
        if self._pause is not None:
            self._continue(0.0)

    # --- the steps ----------------------------------------------------------------------------------
    def _begin_pause(self, now: float) -> None:
        bookies = self._sandbox.bookies
        alive = [bookie.bookie_id for bookie in bookies if bookie.is_running()]
        victim = choose_victim(self.open_ledgers(), alive)
        if victim is None:
            return
        index = [bookie.bookie_id for bookie in bookies].index(victim.bookie_id)
        pid = bookies[index].pid
        self._pause = _Pause(index, victim.bookie_id, pid, now, set())  # first: ``release`` continues it if
        self._pauses += 1                                                  # the pause itself fails
        self._sandbox.pause_bookie(index)
        if self._holds_metadata_lock(pid):
            self._continue(time.monotonic() + LOCK_RETRY_S)
            return
        self._pause.existed = set(self._client.list_ledgers())  # listed after the pause: see the docstring

    def _holds_metadata_lock(self, pid: int | None) -> bool:
        return self._sqlite_path is not None and pid is not None and write_lock_holder(self._sqlite_path) == pid

    def _continue(self, next_pause: float) -> None:
        pause, self._pause = self._pause, None
        self._next_pause = next_pause
        self._sandbox.resume_bookie(pause.index)

    def _kill(self, at_s: float, ledgers: Sequence[LedgerMetadata], metadata: LedgerMetadata | None) -> Kill:
        pause, self._pause = self._pause, None
        paused_s = time.monotonic() - pause.since
        serving = sum(pause.bookie_id in m.current_fragment.bookies for m in ledgers)
        self._sandbox.kill_bookie(pause.index)
        still_open = metadata is not None and self._still_open(metadata.ledger_id)
        if metadata is None:
            return Kill(pause.index, pause.bookie_id, pause.pid, None, None, serving, at_s, round(paused_s, 3), False)
        fragment = metadata.current_fragment
        return Kill(pause.index, pause.bookie_id, pause.pid, metadata.ledger_id, partition_of(metadata), serving,
                    at_s, round(paused_s, 3), still_open, fragment.first_entry_id, tuple(fragment.bookies))

    def _still_open(self, ledger_id: int) -> bool:
        try:
            return self._client.ledger_metadata(ledger_id).state == OPEN
        except LedgerError:
            return False
