"""Reading the last add confirmed from an ensemble: with coverage (open), and by long poll (tailing).

``read_lac`` asks every bookie of the current fragment and lets
``protocol.reads.LacRead`` decide: the maximum LAC once the answers cover
every write set, or a failure when they no longer can (docs/protocol.md L1, L2: a "no such
ledger" with another bookie down is never taken for an empty ledger).
``poll_lac`` long-polls the same bookies for a LAC above ``previous`` and
returns as soon as one reports it (``read_rules.advance_lac``), or
``previous`` when none did in time (L3: never lower).
"""
from __future__ import annotations

import queue
import time
from concurrent.futures import Future

from pyspark_ledger.client.context import ClientContext
from pyspark_ledger.client.rpc_errors import BookieStatus
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.protocol.answers import AnswerKind, LacAnswer
from pyspark_ledger.protocol.read_rules import advance_lac
from pyspark_ledger.protocol.reads import LacRead

_MARGIN_S = 5.0


def lac_answer(done: Future) -> LacAnswer:
    """Classify a LAC-read answer (an exception or a LacResult)."""
    error = done.exception()
    if error is not None:
        return LacAnswer.unknown(str(error))
    result = done.result()
    if result.status == BookieStatus.OK:
        return LacAnswer.ok(max(-1, result.last_add_confirmed))
    if result.status == BookieStatus.NO_SUCH_LEDGER:
        return LacAnswer.no_such_ledger()
    return LacAnswer.unknown(f"{result.status.name}: {result.message}")


def read_lac(ctx: ClientContext, md: LedgerMetadata, key: bytes) -> int:
    """The LAC of an open ledger, read with coverage from its current ensemble (no fencing); ``key`` is the
    ledger's master key (bookies refuse LAC reads without it)."""
    ensemble = md.current_fragment.bookies
    answers: queue.Queue = queue.Queue()
    timeout = ctx.config.read_timeout_s
    for bookie in ensemble:
        future = ctx.transport.read_lac(bookie, md.ledger_id, timeout=timeout, master_key=key)
        future.add_done_callback(lambda done, bookie=bookie: answers.put((bookie, done)))
    lac_read = LacRead(ensemble, md.write_quorum, md.ack_quorum)
    deadline = time.monotonic() + timeout + _MARGIN_S
    for _ in ensemble:
        try:
            bookie, done = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        result = lac_read.record(bookie, lac_answer(done))
        if result.done and not result.failed:
            return result.last_add_confirmed
        if result.failed:
            raise BookieUnavailableError(f"cannot read the last add confirmed of ledger {md.ledger_id}: "
                                         f"{result.reason}", status=BookieStatus.UNAVAILABLE)
    raise BookieUnavailableError(f"cannot read the last add confirmed of ledger {md.ledger_id}: too few bookies "
                                 f"of {', '.join(ensemble)} answered within {timeout} s", status=BookieStatus.TIMEOUT)


def poll_lac(ctx: ClientContext, md: LedgerMetadata, key: bytes, previous: int, wait_s: float) -> int:
    """Long poll: a LAC > ``previous`` as soon as one bookie reports one, else ``previous``."""
    ensemble = md.current_fragment.bookies
    answers: queue.Queue = queue.Queue()
    for bookie in ensemble:
        future = ctx.transport.read_lac(bookie, md.ledger_id, previous=previous, timeout=wait_s,
                                        master_key=key)
        future.add_done_callback(answers.put)
    deadline = time.monotonic() + wait_s + _MARGIN_S
    lac = previous
    for _ in ensemble:
        try:
            done = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        answer = lac_answer(done)
        if answer.kind is AnswerKind.POSITIVE:
            lac = advance_lac(lac, answer.last_add_confirmed)
        if lac > previous:
            break
    return lac
