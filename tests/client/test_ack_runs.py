"""Add answers as runs (docs/protocol.md W9): any mix of OK runs and refusals, in any order a bookie may produce,
reaches the listeners of a real ``AddStream`` exactly as the per-add form does; malformed runs end the stream.

The stream runs on the client's real ``IoLoop``; only the gRPC call under it is a stand-in that hands over
prepared ``AddResultBatch`` messages once the adds are registered."""
from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_ledger.client.add_listeners import AddCallbacks
from pyspark_ledger.client.add_stream import AddStream
from pyspark_ledger.client.io_loop import acquire_io_loop, release_io_loop
from pyspark_ledger.errors import AddStreamEndedError, BookieError, InvalidStateError
from pyspark_ledger.wire.ack_runs import ANSWERS_AS_RUNS, ANSWERS_KEY, RunBuilder, asks_for_runs
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.waiting import wait_until

REFUSALS = (pb.FENCED, pb.UNAUTHORIZED, pb.TOO_MANY_REQUESTS, pb.IO_ERROR, pb.READ_ONLY, pb.BAD_REQUEST)


class PreparedCall:
    """Stands in for the AddStream call: reads give ``messages`` once ``ready`` is set, then EOF."""

    def __init__(self, messages: list[pb.AddResultBatch]) -> None:
        self.messages = list(messages)
        self.ready = threading.Event()

    async def write(self, _batch) -> None:
        return None

    async def done_writing(self) -> None:
        return None

    async def read(self):
        while not self.ready.is_set():
            await asyncio.sleep(0.001)
        return self.messages.pop(0) if self.messages else grpc.aio.EOF

    def cancel(self) -> bool:
        self.messages.clear()
        self.ready.set()
        return True


class Recorder:
    """A listener recording (ledger, entry, status, message) in delivery order; with or without ``on_add_acks``."""

    def __init__(self, takes_runs: bool) -> None:
        self.seen: list[tuple[int, int, int, str]] = []
        self.failed: list[tuple[int, int]] = []
        self.errors: list[BaseException] = []
        self.listener = AddCallbacks(self._results, self._failure, self._acks if takes_runs else None)

    def _results(self, _bookie: str, results: list) -> None:
        self.seen.extend((r.ledger_id, r.entry_id, r.status, r.message) for r in results)

    def _acks(self, _bookie: str, spans: list) -> None:
        for ledger_id, entry_ids in spans:
            assert isinstance(entry_ids, range)
            self.seen.extend((ledger_id, entry_id, pb.OK, "") for entry_id in entry_ids)

    def _failure(self, _bookie: str, keys: list, error: BaseException) -> None:
        self.failed.extend(keys)
        self.errors.append(error)


@pytest.fixture(scope="module")
def io_loop():
    loop = acquire_io_loop()
    yield loop
    release_io_loop(loop)


def deliver(io_loop, owners: dict, messages: list[pb.AddResultBatch]) -> AddStream:
    """Register every add of ``owners`` ((ledger, entry) -> Recorder) on a stream, then let it read ``messages``."""
    call = PreparedCall(messages)
    stream = AddStream(lambda: call, "bookie-1", io_loop)
    for (ledger_id, entry_id), recorder in owners.items():
        stream.send(ledger_id, [(entry_id, b"")], recorder.listener)
    call.ready.set()
    wait_until(lambda: stream.closed, 10, "the prepared answers to be read")
    return stream


def per_add_messages(answers: list, cuts: list[int]) -> list[pb.AddResultBatch]:
    """The per-add form: one AddResult each, the messages cut where ``cuts`` say."""
    return [pb.AddResultBatch(results=[pb.AddResult(ledger_id=ledger_id, entry_id=entry_id, status=status,
                                                    message=message)
                                       for ledger_id, entry_id, status, message in answers[start:end]])
            for start, end in zip([0, *cuts], [*cuts, len(answers)]) if end > start]


def run_messages(answers: list, cuts: list[int]) -> list[pb.AddResultBatch]:
    """The runs form, built as the bookie builds it: per message, maximal stretches of OKs handed over at once."""
    messages = []
    for start, end in zip([0, *cuts], [*cuts, len(answers)]):
        builder, oks = RunBuilder(), []
        for ledger_id, entry_id, status, message in answers[start:end]:
            if status == pb.OK:
                oks.append((ledger_id, entry_id))
                continue
            if oks:
                builder.acked([key[0] for key in oks], [key[1] for key in oks])
                oks = []
            builder.refused(ledger_id, entry_id, status, message)
        if oks:
            builder.acked([key[0] for key in oks], [key[1] for key in oks])
        messages += builder.messages()
    return messages


@st.composite
def bookie_answers(draw):
    """Answers to adds of up to 3 ledgers, in an order a bookie may give them (sent order, runs, shuffles),
    mostly OK; the cut points of the messages; and which of two listeners owns each add."""
    keys = []
    for ledger_id in draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True)):
        first = draw(st.integers(0, 2**40))
        keys += [(ledger_id, first + offset) for offset in range(draw(st.integers(1, 40)))]
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    answers = []
    for ledger_id, entry_id in keys:
        if draw(st.integers(0, 9)) == 0:
            status = draw(st.sampled_from(REFUSALS))
            answers.append((ledger_id, entry_id, status, f"refused {ledger_id}/{entry_id}"))
        else:
            answers.append((ledger_id, entry_id, pb.OK, ""))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(answers) - 1)), max_size=4))))
    owners = draw(st.lists(st.integers(0, 1), min_size=len(keys), max_size=len(keys)))
    return answers, cuts, owners


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bookie_answers())
def test_W9_runs_give_every_listener_what_the_per_add_form_gives(io_loop, case):
    answers, cuts, owners = case
    outcomes = []
    for make in (per_add_messages, run_messages):
        recorders = [Recorder(takes_runs=True), Recorder(takes_runs=False)]
        owner_of = {(a[0], a[1]): recorders[owner] for a, owner in zip(answers, owners)}
        deliver(io_loop, owner_of, make(answers, cuts))
        assert all(not recorder.failed for recorder in recorders)
        outcomes.append([recorder.seen for recorder in recorders])
    assert outcomes[0] == outcomes[1]
    assert sorted(outcomes[1][0] + outcomes[1][1]) == sorted(answers)


@given(bookie_answers())
@settings(max_examples=200, deadline=None)
def test_W9_a_message_holds_its_runs_before_its_results_and_no_answer_is_moved(case):
    answers, cuts, _ = case
    messages = run_messages(answers, cuts)
    expanded = []
    for message in messages:
        for run in message.acked:
            assert run.first_entry_id <= run.last_entry_id
            expanded += [(run.ledger_id, e, pb.OK, "") for e in range(run.first_entry_id, run.last_entry_id + 1)]
        expanded += [(r.ledger_id, r.entry_id, r.status, r.message) for r in message.results]
    assert expanded == answers
    assert len(messages) <= len(answers)


def test_consecutive_answers_of_one_ledger_are_one_run_across_batches():
    builder = RunBuilder()
    builder.acked([7] * 100, list(range(1000, 1100)))
    builder.acked([7] * 50, list(range(1100, 1150)))
    builder.acked([8, 8], [0, 1])
    builder.acked([7, 7, 7], [5, 4, 6])  # out of order: runs of one where the ids do not follow
    (message,) = builder.messages()
    runs = [(run.ledger_id, run.first_entry_id, run.last_entry_id) for run in message.acked]
    assert runs == [(7, 1000, 1149), (8, 0, 1), (7, 5, 5), (7, 4, 4), (7, 6, 6)]
    assert not message.results and builder.messages() == []


def test_an_ok_after_a_refusal_starts_a_new_message():
    builder = RunBuilder()
    builder.acked([1, 1], [0, 1])
    builder.refused(1, 2, pb.FENCED, "fenced")
    builder.acked([1], [3])
    first, second = builder.messages()
    assert [(r.first_entry_id, r.last_entry_id) for r in first.acked] == [(0, 1)]
    assert [(r.entry_id, r.status, r.message) for r in first.results] == [(2, pb.FENCED, "fenced")]
    assert [(r.first_entry_id, r.last_entry_id) for r in second.acked] == [(3, 3)] and not second.results


def test_the_negotiation_metadata():
    assert asks_for_runs([(ANSWERS_KEY, ANSWERS_AS_RUNS)])
    assert asks_for_runs((("user-agent", "x"), (ANSWERS_KEY, ANSWERS_AS_RUNS)))
    assert not asks_for_runs(None) and not asks_for_runs([]) and not asks_for_runs([(ANSWERS_KEY, "per-add")])


@pytest.mark.parametrize("run", [(5, 0, 3), (5, 2, 1), (5, 0, 2**62), (5, -2**63, 2**63 - 1)],
                         ids=["longer", "backwards", "huge", "whole-int64"])
def test_W9_runs_beyond_the_adds_in_flight_end_the_stream(io_loop, run):
    recorder = Recorder(takes_runs=True)
    owners = {(5, entry_id): recorder for entry_id in range(3)}
    message = pb.AddResultBatch(acked=[pb.AckRun(ledger_id=run[0], first_entry_id=run[1], last_entry_id=run[2])])
    stream = deliver(io_loop, owners, [message])
    assert recorder.seen == []
    assert sorted(recorder.failed) == [(5, 0), (5, 1), (5, 2)]
    assert isinstance(recorder.errors[0], BookieError) and "malformed answer" in str(recorder.errors[0])
    assert not isinstance(recorder.errors[0], AddStreamEndedError)  # the client ended it: not a clean end
    assert stream.pending == 0


def test_W9_ids_in_a_run_that_were_not_sent_count_for_nothing(io_loop):
    recorder = Recorder(takes_runs=True)
    owners = {(5, entry_id): recorder for entry_id in (0, 1, 2, 3)}
    message = pb.AddResultBatch(acked=[pb.AckRun(ledger_id=5, first_entry_id=2, last_entry_id=5)])
    deliver(io_loop, owners, [message])
    assert recorder.seen == [(5, 2, pb.OK, ""), (5, 3, pb.OK, "")]
    assert sorted(recorder.failed) == [(5, 0), (5, 1)]  # the stream ended (EOF) with them unanswered
    # the bookie ended it cleanly: it may not have read them (docs/protocol.md W2)
    assert all(isinstance(error, AddStreamEndedError) for error in recorder.errors) and recorder.errors


def test_a_stream_that_ends_fails_exactly_the_adds_still_in_flight_spans_resends_and_per_add_alike(io_loop):
    """Adds kept as spans (sends of the ids that follow), re-sent below them and answered out of order: when the
    stream ends, each listener learns exactly its adds that were not answered, and a repeat is refused."""
    first, second = Recorder(takes_runs=True), Recorder(takes_runs=False)
    call = PreparedCall([
        pb.AddResultBatch(acked=[pb.AckRun(ledger_id=1, first_entry_id=0, last_entry_id=3),
                                 pb.AckRun(ledger_id=2, first_entry_id=5, last_entry_id=5)]),
        pb.AddResultBatch(results=[pb.AddResult(ledger_id=1, entry_id=12, status=pb.OK),
                                   pb.AddResult(ledger_id=1, entry_id=30, status=pb.TOO_MANY_REQUESTS)]),
        pb.AddResultBatch(acked=[pb.AckRun(ledger_id=1, first_entry_id=6, last_entry_id=7)])])
    stream = AddStream(lambda: call, "bookie-1", io_loop)
    stream.send(1, [(entry_id, b"") for entry_id in range(10)], first.listener)  # one span
    stream.send(1, [(entry_id, b"") for entry_id in range(10, 15)], second.listener)  # the next span
    stream.send(2, [(5, b""), (6, b"")], first.listener)
    stream.send(1, [(30, b"")], second.listener)  # a re-send above the spans: a span too
    with pytest.raises(InvalidStateError):
        stream.send(1, [(12, b"")], second.listener)  # in flight already
    with pytest.raises(InvalidStateError):
        stream.send(3, [(1, b""), (1, b"")], second.listener)  # twice in one send
    assert stream.pending == 18
    call.ready.set()
    wait_until(lambda: stream.closed, 10, "the prepared answers to be read")
    assert first.seen == [(1, 0, pb.OK, ""), (1, 1, pb.OK, ""), (1, 2, pb.OK, ""), (1, 3, pb.OK, ""),
                          (2, 5, pb.OK, ""), (1, 6, pb.OK, ""), (1, 7, pb.OK, "")]
    assert second.seen == [(1, 12, pb.OK, ""), (1, 30, pb.TOO_MANY_REQUESTS, "")]
    assert sorted(first.failed) == [(1, 4), (1, 5), (1, 8), (1, 9), (2, 6)]
    assert sorted(second.failed) == [(1, 10), (1, 11), (1, 13), (1, 14)]
    assert stream.pending == 0
