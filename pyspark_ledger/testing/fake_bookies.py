"""In-memory bookies behind the client's transport seam, with hooks to script failures.

``FakeCluster(["b0", "b1", "b2"])`` holds ``FakeBookie`` objects that answer
adds, fencing reads, range reads, LAC reads and explicit LAC writes with the
statuses of the real bookie (``bookie_server``), and one *network* thread
that carries every request and answer in order (each add of a batch
separately, so hooks can single out one entry). ``cluster.transport()`` is a ``BookieTransport``
for one ``LedgerClient``. Requests and answers are real protobuf messages
serialized to bytes, and entries are the client's encoded entries, so the
client's codecs run exactly as against a real bookie.

Hooks (each returns a ``Rule``; ``rule.release()`` ends it and lets anything
it parked go on): ``hold`` parks answers (the bookie did the work),
``hold_request`` parks requests (the bookie has not seen them), ``drop`` loses
requests, ``drop_reply`` loses answers, ``fail`` answers a status instead,
``error`` fails the call like a broken connection, ``end_stream`` as a bookie that ended its add stream cleanly
before it read the add (idle, or draining), ``delay`` answers later.
``set_down`` makes a bookie unreachable, ``corrupt`` damages a stored entry,
``settle()`` waits until the network has nothing left to carry.
Read and LAC-read requests that are parked or lost still time out.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Iterable, Sequence

from pyspark_ledger.client.add_listeners import AddListener
from pyspark_ledger.client.add_wire import AddResult
from pyspark_ledger.client.bookie_answers import LacResult, ReadResult, WriteLacResult
from pyspark_ledger.client.rpc_errors import as_status
from pyspark_ledger.errors import BookieError, BookieUnavailableError, InvalidArgumentError
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.testing.fake_bookie_store import FakeBookie
from pyspark_ledger.testing.fake_network import FakeNetwork, Rule, Request
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

__all__ = ["FakeBookie", "FakeCluster", "FakeTransport", "Rule"]


class FakeCluster:
    """Fake bookies, their registrations and the network between them and the clients."""

    def __init__(self, bookie_ids: Iterable[str] | int = 3) -> None:
        ids = [f"bookie-{i}" for i in range(bookie_ids)] if isinstance(bookie_ids, int) else list(bookie_ids)
        if len(set(ids)) != len(ids) or not ids:
            raise InvalidArgumentError(f"need distinct bookie ids, got {ids}")
        self.bookies = {bookie_id: FakeBookie(bookie_id) for bookie_id in ids}
        self.registered = set(ids)
        self.network = FakeNetwork(self.bookies)
        #: bookie id -> ``Location`` (zone, rack) its registration declares; absent = the default zone
        self.locations: dict = {}

    def __getitem__(self, bookie_id: str) -> FakeBookie:
        return self.bookies[bookie_id]

    def transport(self) -> "FakeTransport":
        return FakeTransport(self)

    def add_bookie(self, bookie_id: str) -> FakeBookie:
        """Start (and register) one more bookie."""
        bookie = self.bookies.setdefault(bookie_id, FakeBookie(bookie_id))
        self.registered.add(bookie_id)
        return bookie

    # --- hooks ----------------------------------------------------------------
    def hold(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        return self.network.add_rule(Rule("hold", bookie, op, **match))

    def hold_request(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        return self.network.add_rule(Rule("hold_request", bookie, op, **match))

    def drop(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        return self.network.add_rule(Rule("drop", bookie, op, **match))

    def drop_reply(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        return self.network.add_rule(Rule("drop_reply", bookie, op, **match))

    def fail(self, bookie: str | None = None, op: str = "add", status: str = "IO_ERROR", **match) -> Rule:
        return self.network.add_rule(Rule("fail", bookie, op, status=pb.Status.Value(status), **match))

    def error(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        return self.network.add_rule(Rule("error", bookie, op, **match))

    def end_stream(self, bookie: str | None = None, op: str = "add", **match) -> Rule:
        """The bookie ends the add stream cleanly (an END with OK) before it read the matching adds."""
        return self.network.add_rule(Rule("end", bookie, op, **match))

    def delay(self, bookie: str | None = None, op: str = "add", seconds: float = 0.1, **match) -> Rule:
        return self.network.add_rule(Rule("delay", bookie, op, seconds=seconds, **match))

    def set_down(self, bookie_id: str, down: bool = True, *, deregister: bool = False) -> None:
        """Make a bookie unreachable (calls fail as from a dead process), or reachable again."""
        self.network.set_down(bookie_id, down)
        if deregister:
            self.registered.discard(bookie_id)

    def set_read_only(self, bookie_id: str, read_only: bool = True) -> None:
        self.bookies[bookie_id].read_only = read_only

    def corrupt(self, bookie_id: str, ledger_id: int, entry_id: int) -> None:
        self.network.call(lambda: self.bookies[bookie_id].corrupt(ledger_id, entry_id))

    def holders(self, ledger_id: int, entry_id: int) -> set[str]:
        """Bookies that store the entry."""
        return self.network.call(lambda: {b.bookie_id for b in self.bookies.values()
                                          if b.has_entry(ledger_id, entry_id)})

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every queued request and answer has been carried."""
        self.network.settle(timeout)

    @property
    def requests(self) -> list[tuple]:
        """(op, bookie, ledger id, first entry, last entry, fence/recovery flag), in arrival order."""
        return list(self.network.log)

    def close(self) -> None:
        self.network.close()

    def __enter__(self) -> "FakeCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeTransport:
    """The ``BookieTransport`` of one client over a FakeCluster."""

    def __init__(self, cluster: FakeCluster) -> None:
        self._cluster = cluster
        self._network = cluster.network
        self._closed = False
        self._futures: set[Future] = set()
        self._lock = threading.Lock()

    @property
    def io_loop(self) -> FakeNetwork:
        """The network thread, which owns the writers' state (as ``GrpcTransport.io_loop`` does)."""
        return self._network

    def send_adds(self, bookie_id: str, ledger_id: int, adds: Sequence[tuple[int, bytes]],
                  listener: AddListener) -> None:
        for entry_id, frame in adds:
            request = pb.AddBatch.FromString(bytes(frame)).adds[0]
            future = self._send(Request("add", bookie_id, ledger_id, entry_id, entry_id, request.recovery,
                                        request.SerializeToString(), None, pb.AddResult.FromString))
            future.add_done_callback(lambda done, key=(ledger_id, entry_id): _answer(listener, bookie_id, key, done))

    def send_adds_to(self, bookie_ids: Sequence[str], ledger_id: int, adds: Sequence[tuple[int, bytes]],
                     listener: AddListener) -> list[tuple[str, BookieError]]:
        refused = []
        for bookie_id in bookie_ids:
            try:
                self.send_adds(bookie_id, ledger_id, adds, listener)
            except BookieError as exc:
                refused.append((bookie_id, exc))
        return refused

    def add(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
            recovery: bool = False) -> "Future[AddResult]":
        data = pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=master_key, body=body,
                             recovery=recovery).SerializeToString()
        return self._send(Request("add", bookie_id, ledger_id, entry_id, entry_id, recovery, data, None,
                                  _add_result))

    def read(self, bookie_id: str, ledger_id: int, first_entry_id: int, last_entry_id: int, *,
             master_key: bytes, fence: bool = False, max_bytes: int = 0,
             timeout: float = 10.0, entry_step: int = 1) -> "Future[ReadResult]":
        data = pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first_entry_id, last_entry_id=last_entry_id,
                              fence=fence, recovery=fence, master_key=master_key,
                              max_bytes=max_bytes, entry_step=entry_step).SerializeToString()
        return self._send(Request("fence" if fence else "read", bookie_id, ledger_id, first_entry_id,
                                  last_entry_id, fence, data, timeout, _read_result, step=max(entry_step, 1)))

    def read_lac(self, bookie_id: str, ledger_id: int, previous: int | None = None,
                 timeout: float = 10.0, *, master_key: bytes) -> "Future[LacResult]":
        fields = {} if previous is None else {"has_previous": True, "previous_lac": previous,
                                              "timeout_ms": int(timeout * 1000)}
        data = pb.ReadLacRequest(ledger_id=ledger_id, master_key=master_key, **fields).SerializeToString()
        wait = timeout + 5.0 if previous is not None else timeout
        return self._send(Request("lac", bookie_id, ledger_id, -1, -1, previous is not None, data, wait,
                                  _lac_result))

    def write_lac(self, bookie_id: str, ledger_id: int, master_key: bytes, last_add_confirmed: int,
                  timeout: float = 10.0) -> "Future[WriteLacResult]":
        data = pb.WriteLacRequest(ledger_id=ledger_id, master_key=master_key,
                                  last_add_confirmed=last_add_confirmed).SerializeToString()
        return self._send(Request("write_lac", bookie_id, ledger_id, -1, -1, False, data, timeout,
                                  _write_lac_result))

    def bookies(self, include_read_only: bool = True) -> list[str]:
        return sorted(b for b in self._cluster.registered
                      if include_read_only or not self._cluster.bookies[b].read_only)

    def locations(self) -> dict:
        """Zone and rack of the bookies that declare one (``FakeCluster.locations``)."""
        return dict(self._cluster.locations)

    def close(self) -> None:
        """Fail every call still in flight, as closing a channel does."""
        with self._lock:
            self._closed = True
            futures, self._futures = list(self._futures), set()
        for future in futures:
            _fail(future, BookieUnavailableError("the client closed its connection", status=BookieStatus.CANCELLED))

    def _send(self, request: Request) -> Future:
        future: Future = Future()
        request.future = future
        with self._lock:
            if self._closed:
                _fail(future, BookieUnavailableError("the client is closed", bookie_id=request.bookie_id,
                                                     status=BookieStatus.CLOSED))
                return future
            self._futures.add(future)
        future.add_done_callback(self._forget)
        self._network.submit(request)
        return future

    def _forget(self, future: Future) -> None:
        with self._lock:
            self._futures.discard(future)


def _fail(future: Future, error: BaseException) -> None:
    if not future.done():
        try:
            future.set_exception(error)
        except Exception:  # noqa: BLE001 - completed concurrently
            pass


def _answer(listener: AddListener, bookie_id: str, key: tuple[int, int], done: Future) -> None:
    error = done.exception()
    if error is None:
        listener.on_add_results(bookie_id, [done.result()])
    else:
        listener.on_add_failure(bookie_id, [key], error)


def _add_result(data: bytes) -> AddResult:
    message = pb.AddResult.FromString(data)
    return AddResult(as_status(message.status), message.message)


def _read_result(data: bytes) -> ReadResult:
    message = pb.ReadResponse.FromString(data)
    return ReadResult(as_status(message.status), message.message,
                      tuple((entry.entry_id, entry.body) for entry in message.entries),
                      message.last_add_confirmed, message.last_entry_id, message.fenced)


def _lac_result(data: bytes) -> LacResult:
    message = pb.ReadLacResponse.FromString(data)
    return LacResult(as_status(message.status), message.message, message.last_add_confirmed,
                     message.last_entry_id, message.fenced)


def _write_lac_result(data: bytes) -> WriteLacResult:
    message = pb.WriteLacResponse.FromString(data)
    return WriteLacResult(as_status(message.status), message.message, message.last_add_confirmed, message.fenced)
