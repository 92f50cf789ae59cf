"""What a writer does with a bookie's answer to one add: the decision, apart from the sending
(docs/protocol.md W7, W8).

* ``OK`` -- the bookie stored the entry: an ack.
* ``FENCED`` -- another client recovered or is recovering the ledger: the writer stops (fatal).
* ``UNAUTHORIZED`` -- the bookie holds another key for this ledger id: the writer stops (fatal).
* ``TOO_MANY_REQUESTS`` -- the bookie shed load before looking at the entry (its guard of first adds
  had too many metadata lookups in flight, or its queues were full). Nothing is wrong with the bookie
  or the entry: the same add is sent to the same bookie again after a back-off, and only an add the
  bookie still sheds ``add_timeout_s`` after it was first sent counts as the bookie's failure. Treating
  shed load as failure would replace healthy bookies and, with every bookie shedding at once (a hundred
  writers creating ledgers together), leave a writer no bookie to replace them with.
* ``READ_ONLY`` -- the bookie will take no more writes: a failure, replaced even when the writer
  delays ensemble changes.
* anything else (IO_ERROR, BAD_REQUEST, NO_SUCH_LEDGER, statuses added later) -- the bookie failed
  this add: a bookie failure, which leads to an ensemble change (or a degraded bookie).

No answer at all is ``action_for_unanswered``'s (docs/protocol.md W2): an add left unanswered by a stream the
bookie ended cleanly (its idle timeout, or a drain: an END with OK) may simply not have been read -- the client
wrote it just as the bookie ended the stream -- so it is sent to the same bookie once more, on a new stream; the
second time, or when a stream ended any other way, it is the bookie's failure. An add settled meanwhile after a
clean end (answered by this bookie after all, or confirmed by the others, whose encoding the writer no longer
keeps) needs nothing more: this bookie may lack a confirmed one, as it would after being replaced.
"""
from __future__ import annotations

import enum

__all__ = ["AddAction", "action_for_status", "action_for_unanswered", "busy_retry_delay", "RETRY_MIN_S",
           "RETRY_MAX_S"]

#: the first re-send of a shed add waits this long; later ones wait half the time since the first send
RETRY_MIN_S = 0.02
#: no re-send of a shed add waits longer than this
RETRY_MAX_S = 0.5


class AddAction(enum.Enum):
    ACK = "ack"
    FENCED = "fenced"
    UNAUTHORIZED = "unauthorized"
    RETRY = "retry"
    REPLACE_NOW = "replace now"
    BOOKIE_FAILED = "bookie failed"


_ACTIONS = {"OK": AddAction.ACK, "FENCED": AddAction.FENCED, "UNAUTHORIZED": AddAction.UNAUTHORIZED,
            "TOO_MANY_REQUESTS": AddAction.RETRY, "READ_ONLY": AddAction.REPLACE_NOW}


def action_for_status(status_name: str) -> AddAction:
    """The action for an add answered with the wire status ``status_name`` (see the module docstring)."""
    return _ACTIONS.get(status_name, AddAction.BOOKIE_FAILED)


def action_for_unanswered(ended_cleanly: bool, sent_again_before: bool, settled: bool = False) -> AddAction | None:
    """The action for an add its stream left unanswered (see the module docstring): BOOKIE_FAILED when the stream
    did not end cleanly; else None (nothing to do) when the add is ``settled`` since (answered, or confirmed by
    the other bookies); else RETRY (send it to the same bookie once more) unless it was sent again for a clean
    end already (then BOOKIE_FAILED)."""
    if not ended_cleanly:
        return AddAction.BOOKIE_FAILED
    if settled:
        return None
    return AddAction.BOOKIE_FAILED if sent_again_before else AddAction.RETRY


def busy_retry_delay(since_first_send: float, add_timeout_s: float) -> float | None:
    """Seconds to wait before sending a shed add again, or None when it is past ``add_timeout_s`` since its
    first send (then it counts as the bookie's failure). The wait grows with the time already spent
    (half of it, between ``RETRY_MIN_S`` and ``RETRY_MAX_S``) and never reaches past the timeout."""
    remaining = add_timeout_s - since_first_send
    if remaining <= 0:
        return None
    wait = min(RETRY_MAX_S, max(RETRY_MIN_S, since_first_send / 2))
    return min(wait, remaining)
