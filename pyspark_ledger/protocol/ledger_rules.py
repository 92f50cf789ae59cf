"""Ledger metadata transitions: create, ensemble change, close, recovery -- and CAS conflicts.

Each transition takes a ``LedgerMetadata`` and returns a new one (never
mutates); the caller writes it with compare-and-set. When that CAS loses, the
``resolve_*`` functions say what to do with the stored metadata, as a
``Resolution``: WRITE (CAS the given metadata), SUCCESS (nothing to write),
CHOOSE_AGAIN (pick replacements again), ERROR (stop; ``reason`` says why).

States only move OPEN -> IN_RECOVERY -> CLOSED (docs/protocol.md M1). Fragment
first entries strictly increase, no fragment starts below the current
fragment's first entry (R8), and a CLOSED ledger's last fragment starts at most
one entry past its end (M3: a fragment begins at the first unconfirmed
entry, LAC + 1). Sealed fragments (every one but the last, and
the last once CLOSED) change only by a repair (M5): re-replication putting
a bookie outside the fragment's ensemble in place of one of its bookies; a
CLOSED ledger changes no other way. ``check_transition`` asserts all of
this, and every change is checked by it (M4).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

from pyspark_ledger.entry import check_digest_type
from pyspark_ledger.errors import InternalError, InvalidArgumentError, LedgerClosedError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, OPEN, STATES, Fragment, LedgerMetadata
from pyspark_ledger.protocol.placement import apply_replacements
from pyspark_ledger.protocol.schedule import check_bookie_index


class Decision(enum.Enum):
    WRITE = "write"
    SUCCESS = "success"
    CHOOSE_AGAIN = "choose_again"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Resolution:
    decision: Decision
    metadata: LedgerMetadata | None = None
    reason: str = ""


def new_ledger_metadata(ledger_id: int, ensemble: Sequence[str], ensemble_size: int, write_quorum: int,
                        ack_quorum: int, digest_type: str, password_check: str,
                        custom: Mapping[str, bytes] | None, ctime_ms: int) -> LedgerMetadata:
    """OPEN metadata with one fragment at entry 0 (E >= Qw >= Qa: docs/protocol.md Q1)."""
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or not 0 <= ledger_id < 2**63:
        raise InvalidArgumentError(f"ledger id must be an integer in 0..2**63-1, got {ledger_id!r}")
    bookies = tuple(str(bookie) for bookie in ensemble)
    if len(set(bookies)) != len(bookies):
        raise InvalidArgumentError(f"ensemble {bookies} names a bookie twice")
    return LedgerMetadata(
        ledger_id=ledger_id, ensemble_size=ensemble_size, write_quorum=write_quorum,
        ack_quorum=ack_quorum, fragments=(Fragment(0, bookies),), state=OPEN,
        digest_type=check_digest_type(digest_type), password_check=password_check,
        custom_metadata=dict(custom or {}), ctime_ms=int(ctime_ms),
    )


def _require_state(md: LedgerMetadata, allowed: tuple[str, ...], action: str) -> None:
    if md.state not in allowed:
        raise LedgerClosedError(
            f"cannot {action} ledger {md.ledger_id}: it is {md.state}, needs {' or '.join(allowed)}"
        )


def ensemble_change(md: LedgerMetadata, replacements: Mapping[int, str], first_unconfirmed_entry: int,
                    *, in_recovery: bool = False) -> LedgerMetadata:
    """Replace bookies from ``first_unconfirmed_entry`` on (docs/protocol.md W2).

    Appends a fragment starting at ``first_unconfirmed_entry``, or replaces the
    current fragment in place when it starts at that same entry (nothing was
    confirmed in it). The writer may do this only while OPEN; recovery's
    write-back (R7) passes ``in_recovery=True`` to do it while IN_RECOVERY.
    """
    _require_state(md, (IN_RECOVERY,) if in_recovery else (OPEN,), "change the ensemble of")
    if not replacements:
        raise InvalidArgumentError("an ensemble change needs at least one replacement")
    current = md.current_fragment
    if not isinstance(first_unconfirmed_entry, int) or first_unconfirmed_entry < current.first_entry_id:
        raise InvalidArgumentError(
            f"new fragment would start at entry {first_unconfirmed_entry!r}, below the current fragment's"
            f" first entry {current.first_entry_id} (fragments must not move backwards)"
        )
    bookies = apply_replacements(current.bookies, replacements)
    fragment = Fragment(first_unconfirmed_entry, bookies)
    kept = md.fragments[:-1] if first_unconfirmed_entry == current.first_entry_id else md.fragments
    return md.with_changes(fragments=kept + (fragment,))


def _check_change_arguments(md: LedgerMetadata, failed: Mapping[int, str],
                            replacements: Mapping[int, str]) -> None:
    if set(failed) != set(replacements):
        raise InvalidArgumentError(
            f"failed indexes {sorted(failed)} and replacement indexes {sorted(replacements)} differ"
        )
    for index in failed:
        check_bookie_index(index, md.ensemble_size)


def resolve_ensemble_change_conflict(stored: LedgerMetadata, failed: Mapping[int, str],
                                     replacements: Mapping[int, str],
                                     first_unconfirmed_entry: int) -> Resolution:
    """After a lost CAS of an ensemble change: re-apply it onto the stored metadata, or stop.

    ``failed`` maps each replaced index to the bookie that failed there. If
    the ledger is no longer OPEN the writer fails its pending adds (W5);
    otherwise the change is re-applied where the failed bookie is still there.
    """
    if stored.state != OPEN:
        return Resolution(Decision.ERROR, stored,
                          f"ledger {stored.ledger_id} is now {stored.state}: the writer must stop")
    current = stored.current_fragment
    if current.first_entry_id > first_unconfirmed_entry:
        return Resolution(Decision.ERROR, stored,
                          f"stored fragment starts at entry {current.first_entry_id}, beyond this writer's"
                          f" first unconfirmed entry {first_unconfirmed_entry}: another writer?")
    _check_change_arguments(stored, failed, replacements)
    todo = {i: replacements[i] for i, bookie in failed.items() if current.bookies[i] == bookie}
    if not todo:
        if current.first_entry_id == first_unconfirmed_entry:
            return Resolution(Decision.SUCCESS, stored, "the change is already in the stored metadata")
        return Resolution(Decision.ERROR, stored,
                          "the failed bookies were replaced by another client at an earlier entry")
    if any(bookie in current.bookies for bookie in todo.values()):
        return Resolution(Decision.CHOOSE_AGAIN, stored,
                          "a chosen replacement is already in the stored ensemble; choose again")
    return Resolution(Decision.WRITE, ensemble_change(stored, todo, first_unconfirmed_entry))


def _check_end(md: LedgerMetadata, last_entry_id: int, length: int) -> None:
    if not isinstance(last_entry_id, int) or last_entry_id < -1:
        raise InvalidArgumentError(f"last entry id must be an integer >= -1, got {last_entry_id!r}")
    if not isinstance(length, int) or length < 0 or (last_entry_id == -1 and length != 0):
        raise InvalidArgumentError(
            f"length must be an integer >= 0 (0 for an empty ledger), got {length!r}"
        )
    if last_entry_id < md.current_fragment.first_entry_id - 1:
        raise InvalidArgumentError(
            f"cannot end ledger {md.ledger_id} at entry {last_entry_id}: its current fragment starts"
            f" at entry {md.current_fragment.first_entry_id}"
        )


def close_metadata(md: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata:
    """The writer's close (C1): OPEN -> CLOSED at its LAC with the total length."""
    _require_state(md, (OPEN,), "close")
    _check_end(md, last_entry_id, length)
    return md.with_changes(state=CLOSED, last_entry_id=last_entry_id, length=length)


def resolve_close_conflict(stored: LedgerMetadata, last_entry_id: int, length: int) -> Resolution:
    """After the writer's close lost its CAS (C3).

    Still OPEN: retry on the stored version. CLOSED at the same end: success.
    CLOSED elsewhere, or IN_RECOVERY: error. Never overwrite.
    """
    if stored.state == OPEN:
        try:
            return Resolution(Decision.WRITE, close_metadata(stored, last_entry_id, length))
        except InvalidArgumentError as exc:
            return Resolution(Decision.ERROR, stored, str(exc))
    if stored.state == IN_RECOVERY:
        return Resolution(Decision.ERROR, stored,
                          f"ledger {stored.ledger_id} is being recovered by another client")
    if (stored.last_entry_id, stored.length) == (last_entry_id, length):
        return Resolution(Decision.SUCCESS, stored, "already closed at the same entry")
    return Resolution(Decision.ERROR, stored,
                      f"ledger {stored.ledger_id} was closed at entry {stored.last_entry_id} (length"
                      f" {stored.length}), not at this writer's {last_entry_id} (length {length})")


def mark_in_recovery(md: LedgerMetadata) -> Resolution:
    """Recovery's first step (F1): OPEN -> IN_RECOVERY (WRITE); IN_RECOVERY -> proceed; CLOSED -> nothing to do."""
    if md.state == OPEN:
        return Resolution(Decision.WRITE, md.with_changes(state=IN_RECOVERY))
    if md.state == IN_RECOVERY:
        return Resolution(Decision.SUCCESS, md, "already in recovery: proceed with recovery")
    return Resolution(Decision.SUCCESS, md, "already closed: nothing to recover")


def recovery_close(md: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata:
    """Recovery's close: IN_RECOVERY -> CLOSED at the last recovered entry."""
    if md.state == OPEN:
        raise RecoveryError(f"ledger {md.ledger_id} is OPEN: mark it IN_RECOVERY before recovering it")
    _require_state(md, (IN_RECOVERY,), "recover")
    _check_end(md, last_entry_id, length)
    return md.with_changes(state=CLOSED, last_entry_id=last_entry_id, length=length)


def resolve_recovery_close_conflict(stored: LedgerMetadata) -> Resolution:
    """After recovery's close lost its CAS (R3): a CLOSED ledger is the agreed end."""
    if stored.state == CLOSED:
        return Resolution(Decision.SUCCESS, stored,
                          f"closed by another client at entry {stored.last_entry_id}")
    return Resolution(Decision.ERROR, stored,
                      f"ledger {stored.ledger_id} metadata changed during recovery (now {stored.state});"
                      " run recovery again from the stored metadata")


def check_transition(before: LedgerMetadata, after: LedgerMetadata) -> None:
    """Raise unless ``after`` is a valid successor of ``before`` (states, fragments, R8)."""
    fixed = ("ledger_id", "ensemble_size", "write_quorum", "ack_quorum", "digest_type", "password_check",
             "repair_secret")
    for name in fixed:
        if getattr(before, name) != getattr(after, name):
            raise InternalError(f"a metadata update must not change {name}")
    if STATES.index(after.state) < STATES.index(before.state):
        raise InternalError(f"ledger state cannot go back from {before.state} to {after.state}")
    if after.state == CLOSED and after.last_entry_id < after.current_fragment.first_entry_id - 1:
        raise InternalError(
            f"ledger {after.ledger_id} cannot end at entry {after.last_entry_id}: its last fragment starts at entry"
            f" {after.current_fragment.first_entry_id} (fragments begin at most one entry past the end)")
    if before.state == CLOSED:
        if len(after.fragments) != len(before.fragments) or after.with_changes(fragments=before.fragments) != before:
            raise InternalError("a CLOSED ledger's metadata is final (only a repair may replace a bookie)")
        _check_repairs(before.fragments, after.fragments)
        return
    kept = len(before.fragments) - 1
    old_firsts = [f.first_entry_id for f in before.fragments[:kept]]
    if len(after.fragments) <= kept or [f.first_entry_id for f in after.fragments[:kept]] != old_firsts:
        raise InternalError("earlier fragments must keep their first entries")
    _check_repairs(before.fragments[:kept], after.fragments[:kept])
    if after.fragments[kept].first_entry_id < before.current_fragment.first_entry_id:
        raise InternalError(
            f"a fragment may not start below the current fragment's first entry"
            f" {before.current_fragment.first_entry_id}"
        )


def _check_repairs(before: Sequence[Fragment], after: Sequence[Fragment]) -> None:
    """Raise unless each sealed fragment of ``after`` is its ``before`` with, at most, some bookies replaced by
    bookies outside that ensemble (re-replication's repair), at the same first entry."""
    for old, new in zip(before, after):
        if new.first_entry_id != old.first_entry_id:
            raise InternalError("sealed fragments must keep their first entries")
        for slot, (was, now) in enumerate(zip(old.bookies, new.bookies)):
            if was != now and now in old.bookies:
                raise InternalError(
                    f"the fragment at entry {old.first_entry_id} is sealed: slot {slot} may only take a bookie outside"
                    f" its ensemble {list(old.bookies)}, not {now!r}")
        if len(set(new.bookies)) != len(new.bookies):
            raise InternalError(f"the fragment at entry {old.first_entry_id} would name a bookie twice")
