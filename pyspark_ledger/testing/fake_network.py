"""The fake network between clients and fake bookies: one thread, rules that hold, lose or fail messages.

Every request, answer, timer and test action runs on the network thread, in
order, so scripted interleavings are reproducible. Futures are completed
outside the bookies' lock (their callbacks run client code). See
``fake_bookies`` for the hooks built on ``Rule``.
"""
from __future__ import annotations

import heapq
import hmac
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from pyspark_ledger.errors import AddStreamEndedError, BookieUnavailableError, InvalidArgumentError
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

REQUEST_ACTIONS = frozenset({"hold_request", "drop", "fail", "error", "end"})
REPLY_ACTIONS = frozenset({"hold", "drop_reply", "delay"})
OPS = frozenset({"add", "read", "fence", "lac", "write_lac", "any"})


@dataclass
class Request:
    op: str              # add | read | fence | lac | write_lac
    bookie_id: str
    ledger_id: int
    first: int
    last: int
    flag: bool           # add: recovery; fence/read: fence; lac: long poll
    data: bytes          # the serialized protobuf request
    timeout: float | None
    convert: Callable[[bytes], object]
    future: Future | None = None
    step: int = 1        # read: the distance between the entries of the range


class Rule:
    """Which messages to treat specially (None matches anything) and what to do with them."""

    def __init__(self, action: str, bookie: str | None, op: str, *, ledger_id: int | None = None,
                 entry_id: int | None = None, recovery: bool | None = None, count: int | None = None,
                 status: int = 0, seconds: float = 0.0) -> None:
        if action not in REQUEST_ACTIONS | REPLY_ACTIONS or op not in OPS:
            raise InvalidArgumentError(f"unknown rule action {action!r} or op {op!r} (ops: {sorted(OPS)})")
        self.action, self.bookie, self.op = action, bookie, op
        self.ledger_id, self.entry_id, self.recovery = ledger_id, entry_id, recovery
        self.remaining = count
        self.status, self.seconds = status, seconds
        self.active = True
        self.parked: list[tuple[Request, bytes | None]] = []
        self.matched = 0
        self.network: FakeNetwork | None = None

    def matches(self, request: Request) -> bool:
        if not self.active or (self.remaining is not None and self.remaining <= 0):
            return False
        if self.bookie is not None and self.bookie != request.bookie_id:
            return False
        if self.op != "any" and self.op != request.op:
            return False
        if self.ledger_id is not None and self.ledger_id != request.ledger_id:
            return False
        if self.entry_id is not None and not (request.op != "lac" and request.first <= self.entry_id <= request.last
                                              and (self.entry_id - request.first) % request.step == 0):
            return False
        return self.recovery is None or request.op != "add" or self.recovery == request.flag

    def release(self) -> None:
        """End the rule; parked requests go on to the bookie, parked answers to the client."""
        self.network.release(self)


class FakeNetwork:
    """The thread that carries requests to fake bookies and answers back."""

    def __init__(self, bookies: dict) -> None:
        self._bookies = bookies
        self._down: set[str] = set()
        self._rules: list[Rule] = []
        self._waiters: dict[tuple[str, int], list[tuple[Request, int]]] = {}
        self._cond = threading.Condition()
        self._queue: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._out: list[tuple[Future, object, BaseException | None]] = []
        self._busy = False
        self._closed = False
        self.log: list[tuple] = []
        self._thread = threading.Thread(target=self._run, name="fake-bookie-network", daemon=True)
        self._thread.start()

    # --- called by clients and tests ---------------------------------------------
    def submit(self, request: Request) -> None:
        self._enqueue(lambda: self._arrive(request))

    def add_rule(self, rule: Rule) -> Rule:
        rule.network = self
        self.call(lambda: self._rules.append(rule))
        return rule

    def release(self, rule: Rule) -> None:
        self.call(lambda: self._release(rule))

    def set_down(self, bookie_id: str, down: bool) -> None:
        self.call(lambda: self._set_down(bookie_id, down))

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` on the network thread (in order with the messages) and return its result."""
        if threading.current_thread() is self._thread:
            return fn()
        done = threading.Event()
        box: list = []

        def run() -> None:
            try:
                box.append((fn(), None))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                box.append((None, exc))
            done.set()
        self._enqueue(run)
        if not done.wait(30.0):
            raise TimeoutError("the fake network did not run the call within 30 s")
        value, error = box[0]
        if error is not None:
            raise error
        return value

    def in_loop_thread(self) -> bool:
        """True on the network thread, which also owns the state of every writer over it (as the
        gRPC transport's network thread does): ``settle`` then covers the writers' events too."""
        return threading.current_thread() is self._thread

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the network thread, in order with the messages (BookieUnavailableError once closed)."""
        self._enqueue(fn)

    def settle(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the fake network did not settle within {timeout} s")
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        pending = [request for rule in self._rules for request, _ in rule.parked]
        pending += [request for waiters in self._waiters.values() for request, _ in waiters]
        for request in pending:
            _complete(request.future, None, BookieUnavailableError("the fake network was closed"))

    # --- the network thread --------------------------------------------------------
    def _enqueue(self, item: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                raise BookieUnavailableError("the fake network is closed", status=BookieStatus.CLOSED)
            self._queue.append(item)
            self._cond.notify_all()

    def _later(self, delay: float, item: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._order), item))
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                item = self._next_item()
                if item is None:
                    return
                self._busy = True
            try:
                item()
                out, self._out = self._out, []
                for future, value, error in out:
                    _complete(future, value, error)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _next_item(self) -> Callable[[], None] | None:
        while not self._closed:
            now = time.monotonic()
            if self._timers and self._timers[0][0] <= now:
                return heapq.heappop(self._timers)[2]
            if self._queue:
                return self._queue.popleft()
            self._cond.wait(self._timers[0][0] - now if self._timers else None)
        return None

    # --- message handling (network thread only) ---------------------------------------
    def _arrive(self, request: Request) -> None:
        if request.future.done():
            return
        self.log.append((request.op, request.bookie_id, request.ledger_id, request.first, request.last,
                         request.flag))
        if request.bookie_id in self._down or request.bookie_id not in self._bookies:
            return self._fail(request, f"bookie {request.bookie_id} is unreachable")
        rule = self._match(request, REQUEST_ACTIONS)
        if rule is not None and self._on_request_rule(rule, request):
            return
        self._process(request)

    def _on_request_rule(self, rule: Rule, request: Request) -> bool:
        if rule.action == "hold_request":
            rule.parked.append((request, None))
        elif rule.action == "error":
            self._fail(request, f"bookie {request.bookie_id} connection broke (scripted)")
            return True
        elif rule.action == "end":  # the bookie ended the stream cleanly before it read this add
            self._out.append((request.future, None, AddStreamEndedError(
                f"bookie {request.bookie_id} ended the add stream before answering every add (scripted)",
                bookie_id=request.bookie_id)))  # UNAVAILABLE, its default status
            return True
        elif rule.action == "fail":
            self._reply(request, _status_answer(request, rule.status))
            return True
        self._arm_timeout(request)
        return True

    def _process(self, request: Request) -> None:
        bookie = self._bookies[request.bookie_id]
        if request.op == "add":
            data, advanced = bookie.handle_add(request.data)
            self._reply(request, data)
            if advanced:
                self._wake_waiters(request.bookie_id, request.ledger_id)
        elif request.op == "write_lac":
            data, advanced = write_lac(bookie, request.data)
            self._reply(request, data)
            if advanced:
                self._wake_waiters(request.bookie_id, request.ledger_id)
        elif request.op == "lac":
            data, parsed = bookie.handle_read_lac(request.data)
            if parsed is not None and parsed.has_previous and bookie.last_add_confirmed(parsed.ledger_id) <= parsed.previous_lac:
                self._waiters.setdefault((request.bookie_id, request.ledger_id), []).append(
                    (request, parsed.previous_lac))
                self._later(parsed.timeout_ms / 1000.0, lambda: self._end_poll(request))
            else:
                self._reply(request, data)
        else:
            self._reply(request, bookie.handle_read(request.data))

    def _reply(self, request: Request, data: bytes) -> None:
        rule = self._match(request, REPLY_ACTIONS)
        if rule is None:
            self._deliver(request, data)
        elif rule.action == "hold":
            rule.parked.append((request, data))
            self._arm_timeout(request)
        elif rule.action == "delay":
            self._later(rule.seconds, lambda: self._deliver(request, data))
        else:  # drop_reply
            self._arm_timeout(request)

    def _deliver(self, request: Request, data: bytes) -> None:
        if request.bookie_id in self._down:
            return self._fail(request, f"bookie {request.bookie_id} is unreachable")
        try:
            self._out.append((request.future, request.convert(data), None))
        except Exception as exc:  # noqa: BLE001 - a garbled answer reaches the client as an error
            self._out.append((request.future, None, exc))

    def _fail(self, request: Request, reason: str, status: BookieStatus = BookieStatus.UNAVAILABLE) -> None:
        self._out.append((request.future, None,
                          BookieUnavailableError(reason, bookie_id=request.bookie_id, status=status)))

    def _arm_timeout(self, request: Request) -> None:
        if request.timeout is not None:
            self._later(request.timeout, lambda: None if request.future.done() else self._fail(
                request, f"{request.op} on bookie {request.bookie_id} timed out", BookieStatus.TIMEOUT))

    def _match(self, request: Request, actions: frozenset) -> Rule | None:
        for rule in self._rules:
            if rule.action in actions and rule.matches(request):
                rule.matched += 1
                if rule.remaining is not None:
                    rule.remaining -= 1
                return rule
        return None

    def _release(self, rule: Rule) -> None:
        rule.active = False
        parked, rule.parked = rule.parked, []
        for request, data in parked:
            if request.future.done():
                continue
            if data is None:
                self._process(request) if request.bookie_id not in self._down else self._fail(
                    request, f"bookie {request.bookie_id} is unreachable")
            else:
                self._deliver(request, data)

    def _set_down(self, bookie_id: str, down: bool) -> None:
        if not down:
            self._down.discard(bookie_id)
            return
        self._down.add(bookie_id)
        for rule in self._rules:
            kept = []
            for request, data in rule.parked:
                if request.bookie_id == bookie_id:
                    self._fail(request, f"bookie {bookie_id} went down")
                else:
                    kept.append((request, data))
            rule.parked = kept
        for key in [key for key in self._waiters if key[0] == bookie_id]:
            for request, _ in self._waiters.pop(key):
                self._fail(request, f"bookie {bookie_id} went down")

    def _wake_waiters(self, bookie_id: str, ledger_id: int) -> None:
        waiters = self._waiters.get((bookie_id, ledger_id))
        if not waiters:
            return
        lac = self._bookies[bookie_id].last_add_confirmed(ledger_id)
        woken = [w for w in waiters if lac > w[1]]
        self._waiters[(bookie_id, ledger_id)] = [w for w in waiters if lac <= w[1]]
        for request, _ in woken:
            self._reply(request, self._bookies[bookie_id].lac_answer(ledger_id))

    def _end_poll(self, request: Request) -> None:
        waiters = self._waiters.get((request.bookie_id, request.ledger_id), [])
        for index, (waiting, _) in enumerate(waiters):
            if waiting is request:
                del waiters[index]
                self._reply(request, self._bookies[request.bookie_id].lac_answer(request.ledger_id))
                return


def write_lac(bookie, data: bytes) -> tuple[bytes, bool]:
    """A fake bookie's WriteLac (as ``bookie_server``): keep max(LAC, given); whether the LAC went up."""
    request = pb.WriteLacRequest.FromString(data)
    ledger = bookie.ledgers.get(request.ledger_id)
    if request.last_add_confirmed < -1:
        status = pb.BAD_REQUEST
    elif not request.master_key:
        status = pb.UNAUTHORIZED
    elif ledger is None:
        status = pb.NO_SUCH_LEDGER
    elif not hmac.compare_digest(ledger.master_key, request.master_key):
        status = pb.UNAUTHORIZED
    else:
        status = pb.OK
    advanced = status == pb.OK and request.last_add_confirmed > ledger.last_add_confirmed
    if advanced:
        ledger.last_add_confirmed = request.last_add_confirmed
    shown = ledger if status == pb.OK else None  # a refused request learns nothing of the ledger
    response = pb.WriteLacResponse(status=status, last_add_confirmed=-1 if shown is None
                                   else shown.last_add_confirmed, fenced=shown is not None and shown.fenced)
    return response.SerializeToString(), advanced


def _status_answer(request: Request, status: int) -> bytes:
    message = f"scripted {pb.Status.Name(status)}"
    if request.op == "add":
        return pb.AddResult(ledger_id=request.ledger_id, entry_id=request.first, status=status,
                            message=message).SerializeToString()
    if request.op == "write_lac":
        return pb.WriteLacResponse(status=status, message=message, last_add_confirmed=-1).SerializeToString()
    if request.op == "lac":
        return pb.ReadLacResponse(status=status, message=message, last_add_confirmed=-1,
                                  last_entry_id=-1).SerializeToString()
    return pb.ReadResponse(status=status, message=message, last_add_confirmed=-1,
                           last_entry_id=-1).SerializeToString()


def _complete(future: Future | None, value: object, error: BaseException | None) -> None:
    if future is None or future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except Exception:  # noqa: BLE001 - completed concurrently (client closed)
        pass
