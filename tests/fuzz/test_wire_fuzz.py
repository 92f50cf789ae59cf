"""Fuzzing a real bookie over gRPC: hostile values in valid messages, mutated messages, raw garbage, many
tiny adds, idle calls and squatted ledger ids (issue 12, "Tests and figures").

Each test runs its inputs against a fresh bookie holding seed data (tests/fuzz/conftest.py), then checks the
bookie: alive, SERVING, Info OK, RSS under the bound, the seed data byte for byte, new writes before and after
a checkpoint, and the same after a restart. Per input, the answer itself is checked where the protocol says
what it must be (a malformed add is never OK, a wrong key never reads or writes a ledger holding data, a
healthy bookie never answers IO_ERROR, statuses travel in responses, not as gRPC errors).

CI runs each kind's default number of inputs (about two minutes in all, derandomized); LEDGER_FUZZ_EXAMPLES,
LEDGER_FUZZ_SEED and LEDGER_FUZZ_SUMMARY run a long one and write its figures (see conftest.py).
"""
from __future__ import annotations

import os
import threading
import time

import grpc
import pytest
from hypothesis import strategies as st

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.entry import EntryCodec, peek_header
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.testing import wire_fuzz as wf
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.fuzz.conftest import CLIENT_CONFIG, SEED_KEY, FuzzTarget, examples, report
from tests.fuzz.runner import run_inputs

MAX_ENTRY_SIZE = 5 * 1024 * 1024  # the bookie's default --max-entry-size
CALL_TIMEOUT_S = 30.0
LONG_POLL_DEADLINE_S = 1.0
CODEC = EntryCodec()


def _status_name(status: int) -> str:
    return pb.Status.Name(status) if status in pb.Status.values() else f"status {status}"


def _grpc_outcome(target: FuzzTarget, exc: grpc.RpcError, method: str, may_wait: bool, what: str) -> None:
    """Count a transport status; UNKNOWN (the handler raised) and unexpected deadlines are failures."""
    code = exc.code()
    target.count(f"grpc {code.name}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and not may_wait:
        target.fail("hang", f"{method} did not answer within its deadline: {what}")
    elif code == grpc.StatusCode.UNKNOWN:
        target.fail("handler raised", f"{method} answered gRPC UNKNOWN ({exc.details()}) to {what}")


def _check_status(target: FuzzTarget, status: int, what: str) -> None:
    target.count(_status_name(status))
    if status == pb.STATUS_UNSPECIFIED or status not in pb.Status.values():
        target.fail("bad answer", f"status {status} is not a valid answer to {what}")
    elif status == pb.IO_ERROR:
        # The disk is healthy: an I/O error means the request damaged the bookie (report the first only).
        if not any(failure["what"] == "io error" for failure in target.failures):
            target.fail("io error", f"a healthy bookie answered IO_ERROR to {what}")


def _malformed(add: pb.AddRequest) -> bool:
    """An add the protocol says must be refused (the bookie peeks at the header: its ids must match)."""
    if len(add.body) > MAX_ENTRY_SIZE or add.entry_id < 0 or not add.master_key:
        return True
    try:
        header = peek_header(add.body)
    except CorruptEntryError:
        return True
    return header.ledger_id != add.ledger_id or header.entry_id != add.entry_id


def send_adds(target: FuzzTarget, adds: list[pb.AddRequest], kind: str = "") -> None:
    """One AddStream with one AddBatch; every add must get exactly one answer."""
    batch = pb.AddBatch(adds=adds)
    what = f"{kind}{wf.describe(batch, 400)}"
    target.note_input(what)
    try:
        answers = target.raw.stream([batch.SerializeToString()], CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        _grpc_outcome(target, exc, "AddStream", False, what)
        return
    results = [result for data in answers for result in pb.AddResultBatch.FromString(data).results]
    if len(results) != len(adds):
        target.fail("bad answer", f"{len(adds)} adds got {len(results)} answers: {what}")
    answered: dict[tuple[int, int], list[int]] = {}
    for result in results:
        answered.setdefault((result.ledger_id, result.entry_id), []).append(result.status)
        _check_status(target, result.status, what)
        if result.status == pb.OK:
            target.note_accepted(f"ledger {result.ledger_id} entry {result.entry_id} (in {what})")
    seeds = target.seed_keys()
    sent: dict[tuple[int, int], list[pb.AddRequest]] = {}
    for add in adds:
        sent.setdefault((add.ledger_id, add.entry_id), []).append(add)
    for key, statuses in answered.items():
        # Adds may share (ledger, entry) within a batch and are answered in durability order, not request
        # order: count the OKs against the adds of that key that may be accepted at all.
        same = sent.get(key, [])
        if not same:
            target.fail("bad answer", f"an answer for ledger {key[0]} entry {key[1]}, which was not sent: {what}")
            continue
        acceptable = sum(1 for add in same if not _malformed(add) and add.ledger_id not in seeds)
        if statuses.count(pb.OK) > acceptable:
            refused = next(add for add in same if _malformed(add) or add.ledger_id in seeds)
            target.fail("accepted bad add", f"OK for {wf.describe(refused)} (malformed, or a wrong key for a "
                        f"ledger holding data), in {what}")


# --- valid messages, hostile values ---------------------------------------------------------
@pytest.mark.parametrize("target", ["guarded", "unguarded"], indirect=True)
def test_hostile_adds(target):
    adds = st.lists(wf.add_requests(MAX_ENTRY_SIZE, target.seed_keys()), min_size=1, max_size=4)
    run_inputs(target, adds, lambda drawn: send_adds(target, [add for add, _ in drawn]), examples(150))
    assert not target.finish(), report(target.failures)


def _check_read(target: FuzzTarget, request: pb.ReadRequest, response: pb.ReadResponse, what: str) -> None:
    _check_status(target, response.status, what)
    first, last = request.first_entry_id, request.last_entry_id
    if (first < 0 or last < first) and response.status != pb.BAD_REQUEST:
        target.fail("bad answer", f"{_status_name(response.status)} (not BAD_REQUEST) to {what}")
    ids = [entry.entry_id for entry in response.entries]
    step = max(request.entry_step, 1)
    if ids and (ids != list(range(first, first + len(ids) * step, step)) or ids[-1] > last):
        target.fail("bad answer", f"entries {ids[:5]}... outside or out of order for {what}")
    payloads = target.seed.get(request.ledger_id)
    if payloads is None:
        return
    if request.master_key != SEED_KEY and (  # a missing key is refused like a wrong one
            response.status not in (pb.UNAUTHORIZED, pb.BAD_REQUEST) or response.entries
            or response.last_add_confirmed != -1):
        target.fail("wrong key served", f"{_status_name(response.status)} (not UNAUTHORIZED) to {what}")
    for entry in response.entries:
        try:
            decoded = CODEC.decode(entry.body, request.ledger_id, entry.entry_id)
        except CorruptEntryError as exc:
            target.fail("wrong bytes", f"entry {entry.entry_id} of seed ledger {request.ledger_id}: {exc}")
            continue
        if entry.entry_id >= len(payloads) or decoded.payload != payloads[entry.entry_id]:
            target.fail("wrong bytes", f"entry {entry.entry_id} of seed ledger {request.ledger_id} differs")


def send_read(target: FuzzTarget, request: pb.ReadRequest) -> None:
    what = wf.describe(request)
    target.note_input(what)
    try:
        data = target.raw.unary("Read", request.SerializeToString(), CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        _grpc_outcome(target, exc, "Read", False, what)
        return
    _check_read(target, request, pb.ReadResponse.FromString(data), what)


def test_hostile_reads_and_fences(target):
    run_inputs(target, wf.read_requests(sorted(target.seed)), lambda request: send_read(target, request),
               examples(200))
    assert not target.finish(), report(target.failures)


def send_read_lac(target: FuzzTarget, request: pb.ReadLacRequest) -> None:
    what = wf.describe(request)
    target.note_input(what)
    may_wait = request.has_previous and request.timeout_ms > 0
    try:
        data = target.raw.unary("ReadLac", request.SerializeToString(),
                                LONG_POLL_DEADLINE_S if may_wait else CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        _grpc_outcome(target, exc, "ReadLac", may_wait, what)
        return
    response = pb.ReadLacResponse.FromString(data)
    _check_status(target, response.status, what)
    if request.ledger_id in target.seed and request.master_key != SEED_KEY and (
            response.status not in (pb.UNAUTHORIZED, pb.BAD_REQUEST) or response.last_add_confirmed != -1):
        target.fail("wrong key served", f"ReadLac without the key answered {_status_name(response.status)} "
                    f"with LAC {response.last_add_confirmed}: {what}")


def send_write_lac(target: FuzzTarget, request: pb.WriteLacRequest) -> None:
    what = wf.describe(request)
    target.note_input(what)
    try:
        data = target.raw.unary("WriteLac", request.SerializeToString(), CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        _grpc_outcome(target, exc, "WriteLac", False, what)
        return
    response = pb.WriteLacResponse.FromString(data)
    _check_status(target, response.status, what)
    if request.ledger_id in target.seed and response.status == pb.OK:
        target.fail("wrong key served", f"WriteLac with a wrong key answered OK: {what}")


def test_hostile_lacs_and_long_polls(target):
    requests = st.one_of(wf.read_lac_requests(sorted(target.seed)), wf.write_lac_requests(target.seed_keys()))
    run_inputs(target, requests,
               lambda request: (send_read_lac if isinstance(request, pb.ReadLacRequest) else send_write_lac)(
                   target, request), examples(60))
    assert not target.finish(), report(target.failures)


#: (adds, ledgers they are spread over) of one AddBatch each: 5 MB and 20 MB of tiny adds to one ledger (the
#: bookie admits --max-inflight-adds of them), 60,000 over 100 ledgers, one add to each of 10,000 new ledgers
TINY_ADD_SHAPES = ((60_000, 1), (240_000, 1), (60_000, 100), (10_000, 10_000))


@pytest.mark.parametrize("target", ["guarded", "unguarded"], indirect=True)
def test_many_tiny_adds_in_one_batch(target):
    """Each AddBatch of TINY_ADD_SHAPES (valid adds of empty entries) in turn: the bookie's RSS stays under
    the bound, during the batch (the background sampler sees the peak) and after it."""
    for index, (count, ledgers) in enumerate(TINY_ADD_SHAPES):
        if target.broken:
            break
        batch = wf.tiny_add_batch(count, 2_000_000_000 + index * 1_000_000, SEED_KEY[::-1], ledgers)
        send_adds(target, list(batch.adds), kind=f"{count} tiny adds over {ledgers} ledger(s), "
                                                 f"{batch.ByteSize()} bytes: ")
        time.sleep(1.0)  # past a checkpoint: memory held after the batch shows too
        target.probe()
    assert not target.finish(), report(target.failures)


LONG_KEY_LEDGERS = 2000
LONG_KEY_BATCH = 50


def test_many_ledgers_with_long_master_keys(target):
    """One add to each of LONG_KEY_LEDGERS new ledgers, each with a master key of 65,535 bytes (the longest
    the bookie accepts), LONG_KEY_BATCH adds per AddBatch (3.3 MB): what the bookie keeps per ledger must not
    take its RSS over the bound (keys are part of a ledger's state: kept in memory and across restarts)."""
    key = b"K" * 65535
    first = 3_000_000_000
    for start in range(0, LONG_KEY_LEDGERS, LONG_KEY_BATCH):
        if target.broken:
            break
        adds = [pb.AddRequest(ledger_id=ledger_id, entry_id=0, master_key=key,
                              body=CODEC.encode(ledger_id, 0, -1, 0, b""))
                for ledger_id in range(first + start, first + start + LONG_KEY_BATCH)]
        send_adds(target, adds, kind=f"ledgers {start}..{start + LONG_KEY_BATCH - 1} of {LONG_KEY_LEDGERS} "
                                     f"with 64 KiB keys: ")
        target.probe()
    assert not target.finish(), report(target.failures)


# --- mutated messages and garbage -----------------------------------------------------------
def valid_messages(target: FuzzTarget) -> st.SearchStrategy[tuple[str, pb.AddBatch]]:
    """(method, message) of every request type, with hostile values."""
    seeds = sorted(target.seed)
    adds = st.lists(wf.add_requests(MAX_ENTRY_SIZE, target.seed_keys()).map(lambda drawn: drawn[0]),
                    min_size=1, max_size=3).map(lambda adds: pb.AddBatch(adds=adds))
    return st.one_of(adds.map(lambda message: ("AddStream", message)),
                     wf.read_requests(seeds).map(lambda message: ("Read", message)),
                     wf.read_lac_requests(seeds).map(lambda message: ("ReadLac", message)),
                     wf.write_lac_requests(target.seed_keys()).map(lambda message: ("WriteLac", message)),
                     st.just(("Info", pb.BookieInfoRequest())))


def _parsed(method: str, data: bytes) -> str:
    """What the bookie's parser makes of ``data`` (for the report of a failure)."""
    try:
        return wf.describe(wf.REQUEST_TYPES[method].FromString(data), 600)
    except Exception:  # noqa: BLE001 - not a message of that type: the bookie answers INTERNAL
        return "unparseable"


def send_raw(target: FuzzTarget, method: str, messages: list[bytes], what: str) -> None:
    what = f"{what}; parsed as {' + '.join(_parsed(method, data) for data in messages)}"
    target.note_input(what)
    may_wait = method == "ReadLac"  # a mutated ReadLac may be a legal long poll of up to a minute
    try:
        answers = target.raw.call(method, messages, LONG_POLL_DEADLINE_S if may_wait else CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        _grpc_outcome(target, exc, method, may_wait, what)
        return
    response_type = {"AddStream": pb.AddResultBatch, "Read": pb.ReadResponse, "ReadLac": pb.ReadLacResponse,
                     "WriteLac": pb.WriteLacResponse, "Info": pb.BookieInfoResponse}[method]
    for data in answers:
        response = response_type.FromString(data)
        for status in ([result.status for result in response.results] if method == "AddStream"
                       else [response.status]):
            _check_status(target, status, what)


@pytest.mark.parametrize("target", ["guarded", "unguarded"], indirect=True)
def test_mutated_messages(target):
    @st.composite
    def inputs(draw):
        method, message = draw(valid_messages(target))
        how, data = draw(wf.mutated(message.SerializeToString()))
        to = draw(st.one_of(st.just(method), st.sampled_from(wf.METHODS)))  # sometimes the wrong method
        return to, how, data, message

    def send(drawn) -> None:
        to, how, data, message = drawn
        send_raw(target, to, [data], f"{how} of {wf.describe(message)} ({len(data)} bytes {data[:48]!r}) "
                                     f"sent to {to}")

    run_inputs(target, inputs(), send, examples(300))
    assert not target.finish(), report(target.failures)


def test_raw_garbage(target):
    def send(drawn) -> None:
        method, messages = drawn
        send_raw(target, method, messages,
                 f"{len(messages)} garbage message(s) of {[len(m) for m in messages]} bytes to {method}: "
                 f"{messages[0][:48]!r}")

    inputs = st.tuples(st.sampled_from(wf.METHODS), st.lists(wf.garbage(), min_size=1, max_size=3))
    run_inputs(target, inputs, send, examples(200))
    assert not target.finish(), report(target.failures)


# --- concurrency and squatting --------------------------------------------------------------
IDLE_CALLS = int(os.environ.get("LEDGER_FUZZ_IDLE_CALLS", "100"))


def test_idle_streams_and_long_polls_leave_health_and_writers_answered(target):
    """IDLE_CALLS idle add streams, then IDLE_CALLS legal long polls (60 s each): health, Info and a normal
    writer must still be answered meanwhile (the probe and the full check run while they are open)."""
    stop = threading.Event()

    def idle_requests():
        stop.wait(120)
        yield from ()

    calls = []
    try:
        for index in range(IDLE_CALLS):
            target.note_input(f"AddStream call {index + 1} of {IDLE_CALLS} that sends nothing")
            calls.append(target.raw.open_stream(idle_requests(), timeout=120))
            target.count("idle stream")
        time.sleep(1.0)
        if target.probe():
            target.full_check()
        lac_poll = pb.ReadLacRequest(ledger_id=min(target.seed), has_previous=True, previous_lac=10**9,
                                     timeout_ms=60_000).SerializeToString()
        for index in range(IDLE_CALLS):
            target.note_input(f"and ReadLac long poll {index + 1} of {IDLE_CALLS} (60 s) on ledger {min(target.seed)}")
            calls.append(target.raw._unary["ReadLac"].future(lac_poll, timeout=120))
            target.count("long poll")
        time.sleep(1.0)
        if target.probe():
            target.full_check()
    finally:
        stop.set()
        for call in calls:
            call.cancel()
    assert not target.finish(), report(target.failures)


def test_fenced_or_added_future_ledger_ids_do_not_stop_writers(target):
    """A raw caller fences the next ledger ids (any key), and adds entry 0 to the ones after: the legitimate
    create_ledger + append of those ids must still work (issue 12 part 7)."""
    squatted = 4
    first = max(target.seed) + 1
    for ledger_id in range(first, first + squatted):
        request = pb.ReadRequest(ledger_id=ledger_id, first_entry_id=0, last_entry_id=0, fence=True,
                                 master_key=b"squatter key")
        send_read(target, request)
    for ledger_id in range(first + squatted, first + 2 * squatted):
        send_adds(target, [pb.AddRequest(ledger_id=ledger_id, entry_id=0, master_key=b"squatter key",
                                         body=CODEC.encode(ledger_id, 0, -1, 0, b"squat"))])
    with LedgerClient(target.metadata_uri, CLIENT_CONFIG) as client:
        for _ in range(2 * squatted):  # the store hands out the squatted ids next (it counts up)
            ledger_id = None
            try:
                writer = client.create_ledger(1, 1, 1, password=b"legit")
                ledger_id = writer.ledger_id
                writer.append(b"legitimate entry")
                writer.close()
            except Exception as exc:  # noqa: BLE001 - the finding
                target.fail("writer blocked", f"create_ledger + append (ledger {ledger_id}) failed after ledgers "
                            f"{first}..{first + 2 * squatted - 1} were squatted: {type(exc).__name__}: {exc}")
    assert not target.finish(), report(target.failures)
