"""The gRPC servicer of the ``Bookie`` service: a thin façade over BookieStorage.

Every outcome the bookie decides (no such entry, fenced, unauthorized, bad
request, I/O error...) travels as a status in the response, never as a gRPC
error, so the replication client can tell it from a timeout. Add streams are
handled by ``add_stream.AddStreamSession``; this module answers Read,
ReadLac, WriteLac (explicit LAC) and Info and keeps track of open streams
for a graceful drain.

Every request is checked at the edge (``limits``: ids, key, ranges) and
answered BAD_REQUEST with a message naming the limit. What the bookie serves
at once is capped per kind (``BookieBudgets``): open add streams
(``--max-add-streams``, refused with RESOURCE_EXHAUSTED), waiting long polls
(``--max-long-polls``) and running Read/ReadLac/WriteLac calls
(``--max-concurrent-reads``, both answered TOO_MANY_REQUESTS), each at once.
The caps sum below the gRPC thread pool, so Info and health checks always
find a thread.

Authorization (``authorization``): every data operation (add, read, range
read, fencing and recovery read, read-LAC and its long poll, write-LAC) needs
the ledger's master key, compared in constant time with the one stored. A
missing key is answered UNAUTHORIZED "... needs its master key", a wrong one
UNAUTHORIZED "master key does not match ledger N" (never BAD_REQUEST, never
data: refused answers carry LAC -1 and no entries), and both are counted in
``bookie_unauthorized_total{op}``. A caller whose verified client certificate
(mutual TLS) has a name listed with ``--admin-identity`` may leave the key
out to read, read LAC, long-poll, write LAC and fence any ledger this bookie
stores (repair and inspection tools; counted in
``bookie_admin_requests_total{op}``); a key it does send must match. Adds
always need the key, except an administrator's recovery write-back
(``recovery=True``) of a ledger this bookie stores; an administrator's
key-less fence of a ledger the bookie does not store is UNAUTHORIZED (no
state is created without the key). A read or LAC read of a ledger the bookie
has no state for answers NO_SUCH_LEDGER (it reveals nothing, and recovery
counts it as a proven negative); first adds and fences of such ledgers go
through the ledger guard (``ledger_guard``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import grpc

from bookie_server.add_stream import AddStreamSession
from bookie_server.authorization import Authority, admin_cannot_create, missing_key, wrong_key

from bookie_server.limits import (MAX_FENCE_WAIT_S, BookieBudgets, StreamLimits, check_read, check_read_lac,
                                   check_write_lac, lac_wait_seconds, read_byte_budget, refusal_over_budget)
from bookie_server.metrics import BookieMetrics
from bookie_server.read_wire import EncodedReadResponse, read_response, returned_bytes
from bookie_server.storage import BookieStorage, LedgerView
from pyspark_ledger.errors import CorruptStorageError, NoSuchEntryError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.wire.ack_runs import asks_for_runs
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

_log = logging.getLogger(__name__)
LONG_POLL_SLICE_S = 0.5  # a long poll re-checks cancellation and draining this often


class BookieServicer(pb_grpc.BookieServicer):
    ledger_guard = None  # a LedgerGuard: checks first adds/fences of unknown ledgers (set by the server)

    def __init__(self, storage: BookieStorage, metrics: BookieMetrics, *, bookie_id: str, version: str,
                 limits: StreamLimits, budgets: BookieBudgets,
                 is_read_only: Callable[[], bool] = lambda: False,
                 on_bytes_freed: Callable[[int], None] | None = None,
                 authority: Authority | None = None) -> None:
        self._storage = storage
        self._authority = authority if authority is not None else Authority()
        self._metrics = metrics
        self._bookie_id = bookie_id
        self._version = version
        self._limits = limits
        self._max_entry_size = limits.max_entry_size
        self._budgets = budgets
        self._on_bytes_freed = on_bytes_freed
        self._is_read_only = is_read_only
        self._draining = threading.Event()
        self._sessions: set[AddStreamSession] = set()
        self._sessions_lock = threading.Condition()
        self._leftovers: list[AddStreamSession] = []

    # --- adds --------------------------------------------------------------------
    def AddStream(self, request_iterator, context):
        streams = self._budgets.add_streams
        if not streams.try_take(1):
            self._metrics.call_refused("add_stream")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          refusal_over_budget("open add streams", streams.limit, "--max-add-streams"))
        try:
            yield from self._add_stream(request_iterator, context)
        finally:
            streams.give_back(1)

    def _add_stream(self, request_iterator, context):
        session = AddStreamSession(self._storage, self._metrics, bookie_id=self._bookie_id, limits=self._limits,
                                   bookie_bytes=self._budgets.inflight_bytes, peer=context.peer(),
                                   on_bytes_freed=self._on_bytes_freed,
                                   ledger_guard=self.ledger_guard,
                                   admin=self._authority.caller_is_admin(context),
                                   answer_runs=self._limits.answer_runs
                                   and asks_for_runs(context.invocation_metadata()),  # docs/protocol.md W9
                                   answer_sender=getattr(context, "answer_sender", None))  # plaintext framed
        with self._sessions_lock:
            self._sessions.add(session)
            if self._draining.is_set():
                session.drain()
        self._metrics.stream_opened()
        try:
            yield from session.responses(request_iterator, context)
        finally:
            self._end_session(session)
            self._metrics.stream_closed()

    def _end_session(self, session: AddStreamSession) -> None:
        """Join the reader, or (while draining) keep it for ``join_stream_threads``.

        A stream the bookie ended itself while the client still sends (idle timeout) is not waited for:
        its reader is blocked on the call until gRPC ends it, which happens once this handler returns."""
        if session.ended_idle:
            joined = True
        else:
            joined = session.join_reader(0.0) if self._draining.is_set() else session.join_reader()
        with self._sessions_lock:
            self._sessions.discard(session)
            if not joined:
                self._leftovers.append(session)
            self._sessions_lock.notify_all()

    # --- reads -------------------------------------------------------------------
    def Read(self, request: pb.ReadRequest, context) -> "pb.ReadResponse | EncodedReadResponse":
        started = time.monotonic()
        reads = self._budgets.reads
        if not reads.try_take(1):
            return self._refused_read(pb.ReadResponse)
        try:
            response = self._read(request, context)
        except Exception as exc:  # noqa: BLE001 - answer, never crash
            _log.exception("read of ledger %d entries %d..%d failed", request.ledger_id,
                           request.first_entry_id, request.last_entry_id)
            response = pb.ReadResponse(status=pb.IO_ERROR, message=f"bookie {self._bookie_id} failed: {exc}",
                                       last_add_confirmed=-1, last_entry_id=-1)
        finally:
            reads.give_back(1)
        self._metrics.read_done(response.status, time.monotonic() - started, returned_bytes(response))
        return response

    def _refused_read(self, response_type, kind: str = "reads", limit_of=None, flag: str = "--max-concurrent-reads"):
        budget = limit_of if limit_of is not None else self._budgets.reads
        self._metrics.call_refused(kind.replace(" ", "_"))
        message = refusal_over_budget(f"{kind} served at once", budget.limit, flag)
        return response_type(status=pb.TOO_MANY_REQUESTS, message=message, last_add_confirmed=-1,
                             **({} if response_type is pb.WriteLacResponse else {"last_entry_id": -1}))

    def _read(self, request: pb.ReadRequest, context) -> pb.ReadResponse:
        ledger_id = request.ledger_id
        problem = check_read(request.first_entry_id, request.last_entry_id, ledger_id, request.master_key,
                             request.entry_step)
        if problem is not None:
            return _no_view(pb.ReadResponse(status=pb.BAD_REQUEST, message=problem))
        op = "fence" if request.fence else "read"
        refusal, key = self._authorize(op, ledger_id, request.master_key, context)
        if refusal is not None:
            return _no_view(pb.ReadResponse(status=pb.UNAUTHORIZED, message=refusal))
        if request.fence:
            status, message = self._fence(ledger_id, key)
            if status == pb.UNAUTHORIZED:
                self._metrics.unauthorized("fence")
                return _no_view(pb.ReadResponse(status=status, message=message))
            if status != pb.OK:
                return self._with_view(pb.ReadResponse(status=status, message=message), ledger_id)
        status, message, found = self._read_entries(
            ledger_id, range(request.first_entry_id, request.last_entry_id + 1, max(request.entry_step, 1)),
            read_byte_budget(request.max_bytes), key)
        if status == pb.UNAUTHORIZED:
            self._metrics.unauthorized(op)
            return _no_view(pb.ReadResponse(status=status, message=message))
        view = self._storage.ledger(ledger_id)
        if view is None:
            return read_response(status, message, found, -1, -1, False)
        return read_response(status, message, found, view.last_add_confirmed, view.last_entry_id, view.fenced)

    def _authorize(self, op: str, ledger_id: int, master_key: bytes, context) -> tuple[str | None, bytes | None]:
        """(why the request is refused UNAUTHORIZED, None) or (None, the key to go on with).

        A given key must match the stored one (a ledger the bookie has no state for passes here: NO_SUCH_LEDGER,
        or the ledger guard, decides next). Without a key only an administrator goes on: with the stored key
        (None if the ledger is not stored: a read then finds no ledger; a fence is refused)."""
        if master_key:
            if self._storage.check_master_key(ledger_id, master_key) == pb.UNAUTHORIZED:
                self._metrics.unauthorized(op)
                return wrong_key(op, ledger_id), None
            return None, master_key
        if not self._authority.caller_is_admin(context):
            self._metrics.unauthorized(op)
            return missing_key(op, ledger_id), None
        stored = self._storage.stored_key(ledger_id)
        if stored is None and op == "fence":
            self._metrics.unauthorized(op)
            return admin_cannot_create(op, ledger_id), None
        if stored is not None:
            self._metrics.admin_served(op)
        return None, stored

    def _fence(self, ledger_id: int, master_key: bytes) -> tuple[int, str]:
        if self.ledger_guard is not None:  # an unknown ledger is created fenced only if its metadata allows
            status, message = self.ledger_guard.check_fence(ledger_id, master_key)
            if status != pb.OK:
                return status, message
        try:
            status = self._storage.fence(ledger_id, master_key).result(timeout=MAX_FENCE_WAIT_S)
        except TimeoutError:
            return pb.IO_ERROR, f"fence of ledger {ledger_id} was not durable within {MAX_FENCE_WAIT_S:.0f} s"
        except Exception as exc:  # noqa: BLE001 - journal failure: an unknown outcome
            _log.error("fence of ledger %d failed: %s", ledger_id, exc)
            return pb.IO_ERROR, f"fence of ledger {ledger_id} failed on bookie {self._bookie_id}: {exc}"
        if status == pb.OK:
            _log.info("ledger %d fenced", ledger_id)
            return status, ""
        if status == pb.UNAUTHORIZED:
            return status, f"{wrong_key('fence', ledger_id)}: not fenced"
        return status, f"fence of ledger {ledger_id} answered {pb.Status.Name(status)}"

    def _read_entries(self, ledger_id: int, entry_ids: range, budget: int,
                      master_key: bytes | None) -> tuple[int, str, list[tuple[int, bytes]]]:
        """(status, message, [(entry_id, body)]): the entries ``entry_ids`` (first..last, maybe every step-th),
        stopping at the first missing/unreadable one or the byte budget; the status and message are the first
        entry's error if there is none. Storage checks ``master_key`` (None: an administrator's read of a ledger
        it does not store) under its lock."""
        found: list[tuple[int, bytes]] = []
        total = 0
        for entry_id in entry_ids:
            try:
                body = self._storage.read_entry(ledger_id, entry_id, master_key)
            except UnauthorizedError:  # the ledger appeared since the key was checked, with another key
                return pb.UNAUTHORIZED, wrong_key("read", ledger_id), []
            except NoSuchLedgerError:
                status, message = pb.NO_SUCH_LEDGER, f"bookie {self._bookie_id} has no ledger {ledger_id}"
            except NoSuchEntryError:
                status, message = pb.NO_SUCH_ENTRY, f"bookie {self._bookie_id} has no entry {entry_id} of ledger {ledger_id}"
            except CorruptStorageError as exc:
                _log.error("ledger %d entry %d is unreadable: %s", ledger_id, entry_id, exc)
                self._metrics.damage_found("read")
                status, message = pb.IO_ERROR, f"ledger {ledger_id} entry {entry_id} is unreadable on bookie {self._bookie_id}: {exc}"
            else:
                if found and total + len(body) > budget:
                    break
                found.append((entry_id, body))
                total += len(body)
                if total >= budget:
                    break
                continue
            if not found:
                return status, message, []
            break
        return pb.OK, "", found

    def _with_view(self, response, ledger_id: int, view: LedgerView | None = None):
        """Fill last_add_confirmed / last_entry_id / fenced from the ledger's current state."""
        view = view if view is not None else self._storage.ledger(ledger_id)
        if view is None:
            response.last_add_confirmed = response.last_entry_id = -1
            response.fenced = False
        else:
            response.last_add_confirmed = view.last_add_confirmed
            response.last_entry_id = view.last_entry_id
            response.fenced = view.fenced
        return response

    # --- LAC ---------------------------------------------------------------------
    def ReadLac(self, request: pb.ReadLacRequest, context) -> pb.ReadLacResponse:
        ledger_id = request.ledger_id
        problem = check_read_lac(ledger_id, request.has_previous, request.previous_lac, request.master_key)
        if problem is not None:
            return pb.ReadLacResponse(status=pb.BAD_REQUEST, message=problem, last_add_confirmed=-1,
                                      last_entry_id=-1)
        refusal, key = self._authorize("read_lac", ledger_id, request.master_key, context)
        if refusal is not None:
            return _lac_refusal(refusal)
        polls = self._budgets.long_polls if request.has_previous else self._budgets.reads
        if not polls.try_take(1):
            if request.has_previous:
                return self._refused_read(pb.ReadLacResponse, "long polls", polls, "--max-long-polls")
            return self._refused_read(pb.ReadLacResponse)
        try:
            if request.has_previous:
                view = self._long_poll(ledger_id, request.previous_lac, lac_wait_seconds(request.timeout_ms),
                                       context)
            else:
                view = self._storage.ledger(ledger_id)
        except Exception as exc:  # noqa: BLE001 - answer, never crash
            _log.exception("read_lac of ledger %d failed", ledger_id)
            return pb.ReadLacResponse(status=pb.IO_ERROR, message=f"bookie {self._bookie_id} failed: {exc}",
                                      last_add_confirmed=-1, last_entry_id=-1)
        finally:
            polls.give_back(1)
        if view is None:
            return pb.ReadLacResponse(status=pb.NO_SUCH_LEDGER, last_add_confirmed=-1, last_entry_id=-1,
                                      message=f"bookie {self._bookie_id} has no ledger {ledger_id}")
        if key is not None and self._storage.check_master_key(ledger_id, key) == pb.UNAUTHORIZED:
            self._metrics.unauthorized("read_lac")  # the ledger appeared meanwhile, with another key
            return _lac_refusal(wrong_key("read_lac", ledger_id))
        return self._with_view(pb.ReadLacResponse(status=pb.OK), ledger_id, view)

    def _long_poll(self, ledger_id: int, previous_lac: int, wait_s: float, context) -> LedgerView | None:
        deadline = time.monotonic() + wait_s
        while True:
            remaining = deadline - time.monotonic()
            view = self._storage.wait_for_lac(ledger_id, previous_lac, max(0.0, min(remaining, LONG_POLL_SLICE_S)))
            if view is None or view.last_add_confirmed > previous_lac or remaining <= LONG_POLL_SLICE_S:
                return view
            if self._draining.is_set() or not context.is_active():
                return view

    def WriteLac(self, request: pb.WriteLacRequest, context) -> pb.WriteLacResponse:
        ledger_id, lac = request.ledger_id, request.last_add_confirmed
        problem = check_write_lac(ledger_id, request.master_key, lac)
        if problem is not None:
            return _write_lac_answer(pb.BAD_REQUEST, problem)
        refusal, key = self._authorize("write_lac", ledger_id, request.master_key, context)
        if refusal is not None:
            return _write_lac_answer(pb.UNAUTHORIZED, refusal)
        if key is None:  # an administrator, and no such ledger here
            return _write_lac_answer(pb.NO_SUCH_LEDGER, f"bookie {self._bookie_id} has no ledger {ledger_id}")
        reads = self._budgets.reads
        if not reads.try_take(1):
            return self._refused_read(pb.WriteLacResponse)
        try:
            status, view = self._storage.write_lac(ledger_id, key, lac)
        except Exception as exc:  # noqa: BLE001 - answer, never crash
            _log.exception("write_lac of ledger %d failed", ledger_id)
            return _write_lac_answer(pb.IO_ERROR, f"bookie {self._bookie_id} failed: {exc}")
        finally:
            reads.give_back(1)
        messages = {pb.NO_SUCH_LEDGER: f"bookie {self._bookie_id} has no ledger {ledger_id}",
                    pb.UNAUTHORIZED: wrong_key("write_lac", ledger_id),
                    pb.BAD_REQUEST: f"ledger id {ledger_id} or its master key is malformed"}
        if status == pb.UNAUTHORIZED:
            self._metrics.unauthorized("write_lac")
            view = None  # a refused request learns nothing of the ledger
        return _write_lac_answer(status, messages.get(status, ""), view)

    # --- info --------------------------------------------------------------------
    def Info(self, request: pb.BookieInfoRequest, context) -> pb.BookieInfoResponse:
        response = pb.BookieInfoResponse(status=pb.OK, bookie_id=self._bookie_id, version=self._version,
                                         max_entry_bytes=self._max_entry_size, read_only=self._is_read_only())
        try:
            response.free_bytes, response.total_bytes = self._storage.disk_usage()
        except OSError as exc:
            _log.error("cannot read the disk usage of the data dir: %s", exc)
            response.status = pb.IO_ERROR
        return response

    # --- draining ----------------------------------------------------------------
    def drain(self, timeout: float) -> bool:
        """Stop admitting adds and wait (bounded) until every add stream has ended."""
        self._draining.set()
        with self._sessions_lock:
            for session in self._sessions:
                session.drain()
            return self._sessions_lock.wait_for(lambda: not self._sessions, timeout)

    def join_stream_threads(self, timeout: float) -> None:
        """After the gRPC server stopped: join reader threads left by drained streams."""
        with self._sessions_lock:
            sessions, self._leftovers = self._leftovers + list(self._sessions), []
        deadline = time.monotonic() + timeout
        for session in sessions:
            if not session.join_reader(max(0.0, deadline - time.monotonic())):
                _log.warning("an add stream reader thread is still blocked at shutdown")


def _no_view(response):
    """A refused request's answer: no ledger state (the ids may not even be valid)."""
    response.last_add_confirmed = response.last_entry_id = -1
    response.fenced = False
    return response


def _lac_refusal(message: str) -> pb.ReadLacResponse:
    return pb.ReadLacResponse(status=pb.UNAUTHORIZED, message=message, last_add_confirmed=-1, last_entry_id=-1)


def _write_lac_answer(status: int, message: str, view: LedgerView | None = None) -> pb.WriteLacResponse:
    if view is None:
        return pb.WriteLacResponse(status=status, message=message, last_add_confirmed=-1)
    return pb.WriteLacResponse(status=status, message=message, last_add_confirmed=view.last_add_confirmed,
                               fenced=view.fenced)
