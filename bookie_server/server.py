"""Wiring of one bookie process: storage, gRPC server, health, metrics, cookie, registration.

``BookieServer(config).start()`` opens the metadata store, checks the cookie,
opens storage (replaying the journal), binds the gRPC port, serves /metrics,
registers the bookie, starts the garbage collector (``--gc-interval``) and
only then reports SERVING on the standard gRPC health service. ``stop()`` is the graceful path taken on SIGTERM/SIGINT:
NOT_SERVING, stop accepting RPCs, let in-flight adds become durable and be
answered (bounded by the grace period), stop the garbage collector, close
storage (drain the journal and checkpoint), deregister, close the metadata
store.

A failure while starting raises a LedgerError whose message is the one line
the CLI prints; whatever was opened is closed again.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

import pyspark_ledger
from bookie_server.config import ServerConfig
from bookie_server.cookie import verify_cookie
from bookie_server.limits import (GRPC_MESSAGE_MARGIN, MAX_READ_BYTES, BookieBudgets, StreamLimits,
                                   grpc_max_message_bytes)
from bookie_server.memory import BurstTrimmer
from bookie_server.metrics import BookieMetrics
from bookie_server.registration import bookie_info, deregister, register
from bookie_server.service import BookieServicer
from pyspark_ledger.errors import InvalidConfigurationError, JournalCorruptError, LedgerError, StorageError
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc

_log = logging.getLogger(__name__)
BOOKIE_SERVICE_NAME = "pyspark_ledger.wire.v1.Bookie"
EXTRA_STOP_WAIT_S = 5.0


def grpc_server_options(max_entry_size: int, max_batch_bytes: int) -> list[tuple[str, int]]:
    """The gRPC server's options: a receive limit near one legitimate batch (``limits.grpc_max_message_bytes``);
    answers (range reads stop near 16 MiB, one entry at least) may be as large as the largest entry."""
    receive = grpc_max_message_bytes(max_entry_size, max_batch_bytes)
    send = max(receive, MAX_READ_BYTES + max_entry_size + GRPC_MESSAGE_MARGIN)
    return [
        ("grpc.max_receive_message_length", receive),
        ("grpc.max_send_message_length", send),
        ("grpc.so_reuseport", 0),  # a port in use must fail the start, not be shared
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class BookieServer:
    """One bookie: start() brings it up, stop() takes it down gracefully."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.bookie_id = config.effective_bookie_id
        self.address = listen_address(config.host, config.port)
        self.metrics = BookieMetrics()
        self.metrics_port: int | None = None
        self._store = None
        self._storage = None
        self._executor: ThreadPoolExecutor | None = None
        self._grpc: grpc.Server | None = None
        self._servicer: BookieServicer | None = None
        self._health: health.HealthServicer | None = None
        self._trimmer: BurstTrimmer | None = None
        self._registration = None
        self._disk_monitor = None
        self._gc = None
        self._stopped = False

    @property
    def metrics_url(self) -> str | None:
        if self.metrics_port is None:
            return None
        return f"http://{listen_address(self.config.host, self.metrics_port)}/metrics"

    # --- start -------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._open_metadata()
            self._open_storage()
            self._build_grpc()
            if self.config.metrics_port >= 0:
                self._serve_metrics()
            self._grpc.start()
            self._watch_disks()
            self._register()
            if self._disk_monitor is not None:
                self._disk_monitor.start()
            self._start_gc()
        except BaseException:
            self._close_resources()
            raise
        self._set_health(health_pb2.HealthCheckResponse.SERVING)
        _log.info("bookie %s serving on %s (metrics %s)", self.bookie_id, self.address, self.metrics_url or "off")

    def _open_metadata(self) -> None:
        from pyspark_ledger.metadata import open_metadata_store

        self._store = open_metadata_store(self.config.metadata_uri)
        verify_cookie(self._store, self.config.data_dir, self.bookie_id, self.config.allow_new_data_dir)

    def _open_storage(self) -> None:
        from bookie_server.storage import BookieStorage

        try:
            self._storage = BookieStorage(self.config.storage_config(), on_journal_sync=self.metrics.journal_synced)
        except JournalCorruptError as exc:
            raise JournalCorruptError(f"{exc} (bookie-server flag: --skip-journal-corruption)") from exc
        except OSError as exc:
            raise StorageError(f"cannot open storage in {self.config.data_dir}: {exc}") from exc

    def _build_grpc(self) -> None:
        """The gRPC server: a pool grown on demand up to every cap plus ``--grpc-workers`` threads, and the
        same number of calls at once (gRPC refuses more with RESOURCE_EXHAUSTED), so the capped kinds
        (add streams, long polls, reads) can never take the threads health checks and Info need."""
        config = self.config
        threads = config.grpc_threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bookie-grpc")
        self._grpc = grpc.server(self._executor, options=grpc_server_options(config.max_entry_size,
                                                                             config.max_batch_bytes),
                                 maximum_concurrent_rpcs=threads)
        budgets = BookieBudgets(inflight_bytes=config.max_inflight_bytes, add_streams=config.max_add_streams,
                                long_polls=config.max_long_polls, reads=config.max_concurrent_reads)
        limits = StreamLimits(max_entry_size=config.max_entry_size, max_inflight_adds=config.max_inflight_adds,
                              max_batch_adds=config.max_batch_adds,
                              max_stream_inflight_bytes=config.max_stream_inflight_bytes,
                              idle_timeout_s=config.add_stream_idle_timeout_s)
        self._trimmer = BurstTrimmer(budgets.inflight_bytes, on_trim=self.metrics.memory_trimmed)
        self._servicer = BookieServicer(self._storage, self.metrics, bookie_id=self.bookie_id,
                                        version=pyspark_ledger.__version__, limits=limits, budgets=budgets,
                                        is_read_only=self._is_read_only, on_bytes_freed=self._trimmer.bytes_freed)
        pb_grpc.add_BookieServicer_to_server(self._servicer, self._grpc)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        self._bind()

    def _bind(self) -> None:
        try:
            bound = self._grpc.add_insecure_port(self.address)
        except RuntimeError as exc:
            bound = 0
            cause: Exception | None = exc
        else:
            cause = None
        if bound != self.config.port:
            raise InvalidConfigurationError(
                f"cannot listen on {self.address}: the port is in use or the address is not local; "
                "pick another --port or --host") from cause

    def _serve_metrics(self) -> None:
        try:
            self.metrics_port = self.metrics.serve_http(self.config.host, self.config.metrics_port)
        except OSError as exc:
            raise InvalidConfigurationError(
                f"cannot serve metrics on {self.config.host}:{self.config.metrics_port}: {exc}; "
                "pick another --metrics-port (0 = any free port)") from exc

    def _register(self) -> None:
        info = bookie_info(self.config.host, self.config.port, self.metrics_port, self.metrics_url,
                           str(self.config.data_dir))
        read_only = self._storage is not None and self._storage.read_only is not None
        self._registration = register(self._store, self.bookie_id, info, read_only=read_only)

    def _watch_disks(self) -> None:
        from bookie_server.disk_monitor import DiskMonitor, DiskPolicy

        config = self.config
        if config.disk_check_interval_s <= 0:
            return
        policy = DiskPolicy(config.disk_usage_threshold, config.disk_usage_lwm)
        directories = [config.data_dir] + ([config.journal_dir] if config.journal_dir is not None else [])
        self._disk_monitor = DiskMonitor(policy, directories, config.disk_check_interval_s, self._disk_changed)
        self._disk_monitor.check()  # a full disk at start: registered read-only from the first moment

    def _start_gc(self) -> None:
        from bookie_server.gc import GarbageCollector

        config = self.config
        if config.gc_interval_s <= 0:
            _log.info("garbage collection off (--gc-interval 0): deleted ledgers keep their data here")
            return
        wait = config.gc_overreplicated_wait_s or None
        self._gc = GarbageCollector(self._storage, self._store, config.gc_interval_s,
                                    config.gc_compaction_threshold, self.metrics, bookie_id=self.bookie_id,
                                    overreplicated_wait_s=wait)
        self._gc.start()
        _log.info("garbage collection every %.1f s (compaction threshold %.2f, over-replicated ledgers after %s)",
                  config.gc_interval_s, config.gc_compaction_threshold, f"{wait:g} s" if wait else "never")

    def _disk_changed(self, read_only: bool, reason: str) -> None:
        """The disk monitor's verdict: refuse or take adds, and register as read-only or writable."""
        storage, registration = self._storage, self._registration
        if storage is not None:
            storage.set_read_only(reason if read_only else None)
        if registration is not None:
            registration.set_read_only(read_only)

    def _is_read_only(self) -> bool:
        storage = self._storage
        return storage is None or storage.failure is not None or storage.read_only is not None

    def _set_health(self, status) -> None:
        for service in ("", BOOKIE_SERVICE_NAME):
            self._health.set(service, status)

    # --- stop --------------------------------------------------------------------
    def stop(self) -> None:
        """Graceful shutdown (idempotent): drain, close storage, deregister."""
        if self._stopped:
            return
        _log.info("bookie %s stopping: draining in-flight requests (grace %.1f s)", self.bookie_id,
                  self.config.shutdown_grace_s)
        grace = self.config.shutdown_grace_s
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        if self._grpc is not None:
            stopped = self._grpc.stop(grace)
            if not self._servicer.drain(grace):
                _log.warning("add streams still open after the %.1f s grace period; cancelling them", grace)
            stopped.wait(grace + EXTRA_STOP_WAIT_S)
            self._servicer.join_stream_threads(EXTRA_STOP_WAIT_S)
        self._close_resources()
        _log.info("bookie %s stopped", self.bookie_id)

    def _close_resources(self) -> None:
        """Close whatever start() opened, in shutdown order; every step runs even if one fails."""
        self._stopped = True
        if self._disk_monitor is not None:
            self._disk_monitor.stop()
        if self._gc is not None:
            self._gc.stop()
        if self._grpc is not None and not self._grpc.stop(0).wait(EXTRA_STOP_WAIT_S):
            _log.warning("the gRPC server did not finish its shutdown within %.0f s", EXTRA_STOP_WAIT_S)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._trimmer is not None:
            self._trimmer.stop()
        for step in (self._close_storage, self._deregister, self.metrics.stop_http, self._close_store):
            try:
                step()
            except LedgerError as exc:
                _log.error("shutdown step %s failed: %s", step.__name__, exc)

    def _close_storage(self) -> None:
        if self._storage is not None:
            storage, self._storage = self._storage, None
            storage.close()

    def _deregister(self) -> None:
        registration, self._registration = self._registration, None
        deregister(registration)

    def _close_store(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            store.close()
