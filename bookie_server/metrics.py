"""Prometheus metrics of one bookie, in a private registry, and the /metrics HTTP endpoint.

Metric names (all prefixed ``bookie_``): ``add_requests_total{status}``,
``read_requests_total{status}``, ``add_latency_seconds``,
``read_latency_seconds``, ``journal_fsync_latency_seconds``,
``journal_batch_records``, ``journal_batch_bytes``, ``bytes_written_total``,
``bytes_read_total``, ``inflight_adds``, ``add_streams``; garbage collection:
``gc_passes_total{outcome}``, ``gc_ledgers_collected_total``,
``gc_entry_logs_deleted_total``, ``gc_entry_logs_compacted_total``,
``gc_entries_copied_total``, ``gc_bytes_reclaimed_total``; damage:
``storage_damage_found_total{where}`` (``read``: a read found a damaged or
missing record and answered IO_ERROR; ``journal``: journal regions or
entries skipped at start under ``--skip-journal-corruption``); load shedding: ``calls_refused_total{kind}``
(calls refused at once past a cap: add streams, long polls, reads), ``memory_trims_total``
(heap memory handed back after a burst of adds); the Python heap: ``python_frozen_objects`` (objects kept out of
the collector's passes after start-up), ``python_gc_pause_seconds{generation}`` (each pass of Python's cyclic
collector, which stops every thread; ``bookie_server.python_heap``); authorization (``authorization.OPERATIONS``:
add, read, fence, read_lac, write_lac): ``unauthorized_total{op}`` (requests refused UNAUTHORIZED: a missing
or wrong master key), ``admin_requests_total{op}`` (requests served without the ledger's key because the
caller is an ``--admin-identity``).

With a TLS certificate (``serve_http(..., tls=ServerTls)``) /metrics is served over HTTPS with the bookie's
certificate and key (no client certificate is asked for: scrapers see counts, never ledger data).
"""
from __future__ import annotations

import socket
import ssl
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from bookie_server.authorization import OPERATIONS
from bookie_server.metric_tallies import AddPathTallies
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)
_RECORD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 10_000)
_STOP_POKE_S = 0.05  # while stopping: how often the endpoint's blocked accept is woken to see the stop
_BYTE_BUCKETS = tuple(4**k * 1024 for k in range(9))  # 1 KiB .. 64 MiB
DAMAGE_PLACES = ("read", "journal")
STATUS_NAMES = {number: name for name, number in pb.Status.items()}


#: how a framed port connection's handshake ended: an add stream, a read connection (W12), refused past a cap,
#: broken rules, or gone
FRAMED_OUTCOMES = ("streamed", "reads", "refused", "bad_handshake", "gone")


class BookieMetrics:
    """All metrics of one bookie; every method is cheap and thread-safe."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        # the add path's metrics: updated once or twice per batch, as plain counts (bookie_server.metric_tallies)
        self._tallies = AddPathTallies(STATUS_NAMES, pb.STATUS_UNSPECIFIED, _LATENCY_BUCKETS, _RECORD_BUCKETS,
                                       _BYTE_BUCKETS)
        reg.register(self._tallies)
        reads = Counter("bookie_read_requests", "Reads answered, by status", ["status"], registry=reg)
        self._reads = {number: reads.labels(status=name) for number, name in STATUS_NAMES.items()}
        self._read_latency = Histogram("bookie_read_latency_seconds", "Read request latency",
                                       buckets=_LATENCY_BUCKETS, registry=reg)
        self._bytes_read = Counter("bookie_bytes_read", "Entry bytes returned by reads", registry=reg)
        self._streams = Gauge("bookie_add_streams", "Open add streams", registry=reg)
        framed = Counter("bookie_framed_add_connections",
                         "Connections to the framed port (docs/protocol.md W11, W12), by outcome of their handshake "
                         "(streamed: an add stream; reads: a read connection)", ["outcome"], registry=reg)
        self._framed = {outcome: framed.labels(outcome=outcome) for outcome in FRAMED_OUTCOMES}
        self._gc_passes = Counter("bookie_gc_passes", "Garbage collection passes, by outcome", ["outcome"],
                                  registry=reg)
        self._gc_ledgers = Counter("bookie_gc_ledgers_collected", "Ledgers deleted by garbage collection",
                                   registry=reg)
        self._gc_logs = Counter("bookie_gc_entry_logs_deleted", "Entry logs deleted by garbage collection",
                                registry=reg)
        self._gc_compacted = Counter("bookie_gc_entry_logs_compacted", "Entry logs compacted", registry=reg)
        self._gc_copied = Counter("bookie_gc_entries_copied", "Live entries copied by compaction", registry=reg)
        self._gc_bytes = Counter("bookie_gc_bytes_reclaimed", "Entry log bytes freed by garbage collection",
                                 registry=reg)
        damage = Counter("bookie_storage_damage_found", "Damaged stored data found, by where it was found",
                         ["where"], registry=reg)
        self._damage = {where: damage.labels(where=where) for where in DAMAGE_PLACES}
        self._refused = Counter("bookie_calls_refused", "Calls refused at once past a cap, by kind", ["kind"],
                                registry=reg)
        unauthorized = Counter("bookie_unauthorized", "Requests refused UNAUTHORIZED (missing or wrong master "
                               "key), by operation", ["op"], registry=reg)
        admin = Counter("bookie_admin_requests", "Requests served without the ledger's key on an administrator "
                        "identity, by operation", ["op"], registry=reg)
        self._unauthorized = {op: unauthorized.labels(op=op) for op in OPERATIONS}
        self._admin = {op: admin.labels(op=op) for op in OPERATIONS}
        self._trims = Counter("bookie_memory_trims", "Heap memory handed back to the system after a burst",
                              registry=reg)
        self._frozen = Gauge("bookie_python_frozen_objects",
                             "Python objects frozen after start-up (skipped by the cyclic collector)", registry=reg)
        pauses = Histogram("bookie_python_gc_pause_seconds",
                           "Passes of Python's cyclic garbage collector (every thread waits), by generation",
                           ["generation"], buckets=_LATENCY_BUCKETS, registry=reg)
        self._gc_pauses = {generation: pauses.labels(generation=str(generation)) for generation in range(3)}
        self._http = None
        self._http_thread: threading.Thread | None = None

    # --- recording ---------------------------------------------------------------
    def adds_submitted(self, count: int) -> None:
        tallies = self._tallies
        with tallies.lock:
            tallies.inflight += count

    def adds_completed(self, statuses: list[int], seconds: float, stored_bytes: int) -> None:
        """One storage batch finished: count statuses, the batch's latency (one observation: all its adds
        share it, and a histogram update per add cost more than storing a small entry), bytes."""
        tallies = self._tallies
        ok = statuses.count(pb.OK)
        with tallies.lock:
            tallies.inflight -= len(statuses)
            tallies.adds[pb.OK] += ok
            if ok != len(statuses):
                for status in statuses:
                    if status != pb.OK:
                        tallies.count_answers(status, 1)
            tallies.add_latency.add(seconds)
            tallies.bytes_written += stored_bytes

    def adds_refused(self, status: int, count: int) -> None:
        tallies = self._tallies
        with tallies.lock:
            tallies.count_answers(status, count)

    def read_done(self, status: int, seconds: float, returned_bytes: int) -> None:
        self._reads[status].inc()
        self._read_latency.observe(seconds)
        if returned_bytes:
            self._bytes_read.inc(returned_bytes)

    def journal_synced(self, records: int, written_bytes: int, fsync_seconds: float) -> None:
        """The storage engine's ``on_journal_sync`` hook (called by the journal thread)."""
        tallies = self._tallies
        with tallies.lock:
            tallies.batch_records.add(records)
            tallies.batch_bytes.add(written_bytes)
            tallies.fsync_latency.add(fsync_seconds)

    def gc_pass_done(self, result) -> None:
        """One garbage collection pass (a ``gc.GcPass``) finished."""
        self._gc_passes.labels(outcome=result.outcome).inc()
        self._gc_ledgers.inc(len(result.ledgers_deleted))
        self._gc_logs.inc(len(result.logs_deleted))
        self._gc_compacted.inc(len(result.logs_compacted))
        self._gc_copied.inc(result.entries_copied)
        self._gc_bytes.inc(result.bytes_reclaimed)

    def damage_found(self, where: str, count: int = 1) -> None:
        """Damaged stored data was found (``where``: one of ``DAMAGE_PLACES``)."""
        if count:
            self._damage[where].inc(count)

    def call_refused(self, kind: str) -> None:
        self._refused.labels(kind=kind).inc()

    def unauthorized(self, op: str, count: int = 1) -> None:
        """Requests of ``op`` (one of ``authorization.OPERATIONS``) refused UNAUTHORIZED."""
        self._unauthorized[op].inc(count)

    def admin_served(self, op: str, count: int = 1) -> None:
        """Requests of ``op`` served without the ledger's key, on an administrator identity."""
        self._admin[op].inc(count)

    def memory_trimmed(self) -> None:
        self._trims.inc()

    def python_heap_frozen(self, objects: int) -> None:
        self._frozen.set(objects)

    def python_gc_paused(self, generation: int, seconds: float) -> None:
        histogram = self._gc_pauses.get(generation)
        if histogram is not None:
            histogram.observe(seconds)

    def framed_connection(self, outcome: str) -> None:
        """A framed port connection's handshake ended: ``outcome`` is one of ``FRAMED_OUTCOMES``."""
        self._framed[outcome].inc()

    def stream_opened(self) -> None:
        self._streams.inc()

    def stream_closed(self) -> None:
        self._streams.dec()

    # --- endpoint ----------------------------------------------------------------
    def serve_http(self, host: str, port: int, tls=None) -> int:
        """Serve /metrics on host:port (0 = a free port) from a thread; returns the bound port. With ``tls``
        (a ``ServerTls``) the endpoint speaks HTTPS only, with the bookie's certificate and key."""
        server_class = _ThreadingWSGIServer
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.cert_file, tls.key_file)

            class _TlsServer(_ThreadingWSGIServer):
                def get_request(self):
                    sock, address = super().get_request()
                    return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

                def handle_error(self, request, client_address) -> None:
                    """A client that fails the handshake (e.g. plain HTTP) is dropped without a traceback."""

            server_class = _TlsServer
        self._http = make_server(host, port, make_wsgi_app(self.registry), server_class,
                                 handler_class=_QuietHandler)
        # No poll interval: the thread sleeps in accept until a scrape (or stop_http's wake-up) arrives, instead
        # of waking 20 times a second on an idle bookie.
        self._http_thread = threading.Thread(target=self._http.serve_forever, args=(None,),
                                             name="bookie-metrics-http", daemon=True)
        self._http_thread.start()
        return self._http.server_port

    def stop_http(self) -> None:
        """Stop the endpoint and join its thread (idempotent)."""
        if self._http is None:
            return
        stopping = threading.Thread(target=self._http.shutdown, name="bookie-metrics-stop", daemon=True)
        stopping.start()  # sets the stop flag, then waits for serve_forever to see it
        while stopping.is_alive():
            _wake(self._http.server_address)  # serve_forever blocks without a timeout: a connection wakes it
            stopping.join(_STOP_POKE_S)
        self._http.server_close()
        self._http_thread.join()
        self._http = self._http_thread = None


def _wake(address: tuple) -> None:
    """Connect to the endpoint and hang up at once (the server ignores it once its stop flag is set)."""
    try:
        socket.create_connection(address[:2], timeout=1.0).close()
    except OSError:
        pass  # already closed, or the accept queue is full: the stop loop tries again


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
        """Scrapes are not notable events."""
