"""A writer's handling of its bookies' answers: acks, and what each other status means for the writer.

Part of ``LedgerWriter`` (``writer.py``), as a base class; every method runs
on the writer's owner thread (``add_bookkeeping.WriterOwner``). The decision
for each add status is the protocol core's (``protocol.add_answers``,
docs/protocol.md W7, W8): FENCED and UNAUTHORIZED stop the writer;
TOO_MANY_REQUESTS (shed load) is sent to the same bookie again after a
back-off until ``add_timeout_s`` after its first send; READ_ONLY is a bookie
failure replaced at once; anything else is a bookie failure
(``writer_changes``). Silence is one too: the add-timeout sweep asks the
core (``protocol.add_timeouts``, W2, W7) which bookies left an add
unanswered for ``add_timeout_s``. A stream the bookie ended cleanly with adds
unanswered (``AddStreamEndedError``) is not one by itself: each such add still
unconfirmed goes to that bookie once more, on a new stream
(``protocol.add_answers.action_for_unanswered``, W2).
"""
from __future__ import annotations

import logging
import time
from operator import attrgetter

from pyspark_ledger.client.rpc_errors import BookieStatus, as_status
from pyspark_ledger.errors import AddStreamEndedError, BookieError, error_for_status
from pyspark_ledger.protocol.add_answers import AddAction, action_for_status, action_for_unanswered, busy_retry_delay
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


log = logging.getLogger(__name__)


def _ignore(*_args) -> None:
    return None


_ENTRY_ID, _STATUS = attrgetter("entry_id"), attrgetter("status")


class AddAnswers:
    """The answer half of ``LedgerWriter`` (see the module docstring)."""

    # --- the listeners of the add streams (network thread): one owner event each -----------
    def _answered(self, bookie: str, results: list) -> None:
        """The add-stream listener (network thread): one writer event per answer batch of a bookie."""
        self._owner.post(self._on_results, bookie, results)

    def _acked_runs(self, bookie: str, spans: list) -> None:
        """The listener of runs of OK answers (docs/protocol.md W9; network thread): one writer event each."""
        self._owner.post(self._on_acks, bookie, spans)

    def _stream_failed(self, bookie: str, keys: list[tuple[int, int]], error: BookieError) -> None:
        """The stream to ``bookie`` ended with these adds unanswered."""
        if isinstance(error, AddStreamEndedError):
            self._owner.post(self._on_stream_ended, bookie, [entry_id for _, entry_id in keys], str(error))
        else:
            self._owner.post(self._on_bookie_error, keys[0][1], bookie, str(error))

    def _on_stream_ended(self, bookie: str, entry_ids: list[int], reason: str) -> None:
        """``bookie`` ended its stream cleanly with these adds unanswered (docs/protocol.md W2): each one still
        unconfirmed and unanswered goes to it once more, on a new stream, with its first send time kept (the
        add-timeout sweep still counts from it); one already sent again for this makes it the bookie's failure.
        An add confirmed meanwhile by the other bookies is not sent again (its encoding is gone): this bookie may
        lack it, as it would after replacing the bookie."""
        if self._failure is not None or bookie in self._failed_bookies:
            return
        lac = self._tracker.last_add_confirmed
        self._sent_again = {key for key in self._sent_again if key[1] > lac}
        again = []
        for entry_id in entry_ids:
            frame = self._frames.get(entry_id)  # gone once confirmed
            action = action_for_unanswered(True, (bookie, entry_id) in self._sent_again,
                                           frame is None or not self._outstanding.is_unanswered(bookie, entry_id))
            if action is AddAction.BOOKIE_FAILED:
                return self._on_bookie_error(entry_id, bookie, f"{reason}, again after the add was sent again")
            if action is AddAction.RETRY:
                again.append((entry_id, frame))
        if again:
            log.info("ledger %d: bookie %s ended its add stream with %d add(s) unanswered (first: entry %d); "
                     "sending them to it again", self._ledger_id, bookie, len(again), again[0][0])
            self._sent_again.update((bookie, entry_id) for entry_id, _ in again)
            self._transmit(bookie, again)

    # --- the owner: answers --------------------------------------------------------------
    def _on_results(self, bookie: str, results: list) -> None:
        """One answer batch of a bookie: acks, and statuses that end a bookie or the writer."""
        statuses = list(map(_STATUS, results))
        if statuses.count(pb.OK) == len(statuses):  # nearly always: the batch's acks in one go
            entry_ids = list(map(_ENTRY_ID, results))
            self._outstanding.answered(bookie, entry_ids)
            self._outstanding.acked(bookie)
            self._confirm(self._tracker.ack_range(entry_ids, bookie))
            return
        sent = self._outstanding.of(bookie)
        forget = sent.pop if sent is not None else _ignore
        ok, acked = pb.OK, []
        for result in results:
            entry_id = result.entry_id
            sent_at = forget(entry_id, None)
            if result.status == ok:
                acked.append(entry_id)
                continue
            if acked:  # the acks before this answer count first, as they came first
                self._confirm(self._tracker.ack_range(acked, bookie))
                acked = []
            self._on_status(entry_id, bookie, as_status(result.status), result.message, sent_at)
        if acked:
            self._outstanding.acked(bookie)
            self._confirm(self._tracker.ack_range(acked, bookie))

    def _on_acks(self, bookie: str, spans: list) -> None:
        """Runs of OK answers of a bookie (docs/protocol.md W9): ``(ledger id, range of entry ids)`` pairs of this
        writer's ledger, in the bookie's order, each acknowledged as ``_on_results`` acknowledges an all-OK batch."""
        outstanding = self._outstanding
        for _, entry_ids in spans:
            outstanding.answered(bookie, entry_ids)
        outstanding.acked(bookie)
        for _, entry_ids in spans:
            self._confirm(self._tracker.ack_range(entry_ids, bookie))

    def _on_status(self, entry_id: int, bookie: str, status: BookieStatus, message: str,
                   sent_at: float | None) -> None:
        action = action_for_status(status.name)  # the decision is the protocol core's (``add_answers``)
        if action is AddAction.FENCED:
            return self._fail_writer(error_for_status(status,
                f"ledger {self.ledger_id} was fenced by another client (bookie {bookie}, entry {entry_id}); "
                "adds not yet confirmed may or may not be in the ledger"))
        if action is AddAction.UNAUTHORIZED:
            return self._fail_writer(error_for_status(status,
                f"bookie {bookie} refused entry {entry_id} of ledger {self.ledger_id}: it holds another master "
                f"key for this ledger id ({message})"))
        if action is AddAction.RETRY and sent_at is not None and self._retry_later(entry_id, bookie, sent_at):
            self._outstanding.shed(bookie, message)
            return None
        self._on_bookie_error(entry_id, bookie, f"{status.name}: {message}",
                              replace_now=action is AddAction.REPLACE_NOW)

    def _retry_later(self, entry_id: int, bookie: str, sent_at: float) -> bool:
        """Send an add the bookie shed to it again after a back-off; False when its time is up (a failure).

        Until then the add stays unanswered with its first send time, so the timeout sweep still ends it."""
        wait = busy_retry_delay(time.monotonic() - sent_at, self._ctx.config.add_timeout_s)
        if wait is None:
            return False
        self._outstanding.kept_unanswered(bookie, entry_id, sent_at)
        self._ctx.scheduler.call_later(wait, lambda: self._owner.post(self._resend, entry_id, bookie))
        return True

    def _resend(self, entry_id: int, bookie: str) -> None:
        """The back-off of a shed add ended: send it again unless it was answered, confirmed or moved
        meanwhile (the bookie failed or was replaced: ``UnansweredAdds`` forgot it)."""
        frame = self._frames.get(entry_id)
        if self._failure is not None or frame is None or not self._outstanding.is_unanswered(bookie, entry_id):
            return
        self._transmit(bookie, [(entry_id, frame)])

    # --- add timeouts -----------------------------------------------------------------
    def _sweep_interval(self) -> float:
        return max(0.01, self._ctx.config.add_timeout_s / 4)

    def _check_timeouts(self) -> None:
        self._owner.post(self._time_out)

    def _time_out(self) -> None:
        """The sweep: bookies silent (or still shedding) for ``add_timeout_s`` fail -- the core decides which
        (``protocol.add_timeouts``, docs/protocol.md W2, W7); then the next sweep, unless stopped."""
        for silent in self._outstanding.timed_out(time.monotonic(), self._ctx.config.add_timeout_s):
            self._on_bookie_error(silent.entry_id, silent.bookie, silent.reason)
        if not self._tracker.stopped:  # also while close() waits for adds in flight
            self._timer = self._ctx.scheduler.call_later(self._sweep_interval(), self._check_timeouts)
