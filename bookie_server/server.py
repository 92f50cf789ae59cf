"""Wiring of one bookie process: storage, gRPC server, health, metrics, cookie, registration.

``BookieServer(config).start()`` first checks that the port is free (a
port clash fails the start before anything is read or written), opens the
metadata store, checks the cookie (reading only), opens storage (replaying
the journal), binds the gRPC port, serves /metrics, starts gRPC, and only
then, the bookie being known to serve, writes the cookie (if it is new),
registers the bookie (with the free and total space of its journal and
ledger dirs, kept current by ``space_report``), starts the garbage collector (``--gc-interval``) and
reports SERVING on the standard gRPC health service.

Health and registration say whether the bookie takes adds: a full disk (the
disk monitor) or a storage failure (``storage_watch``) registers it
read-only and turns its health NOT_SERVING at once; reads are served
throughout. After a full disk the storage is reopened (journal replayed)
once space is back, and both turn back. A disk too full to replay the
journal at start: the server releases its disk reserve (``--disk-reserve``)
and starts read-only. ``stop()`` is the graceful path taken on SIGTERM/SIGINT:
NOT_SERVING, stop accepting RPCs, let in-flight adds become durable and be
answered (bounded by the grace period), stop the garbage collector, close
storage (drain the journal and checkpoint), deregister, close the metadata
store.

A failure while starting raises a LedgerError whose message is the one line
the CLI prints; whatever was opened is closed again.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

import pyspark_ledger
from bookie_server.add_wire import register_bookie_service
from bookie_server.authorization import Authority
from bookie_server.config import ServerConfig
from bookie_server.cookie import plan_cookie
from bookie_server.limits import BookieBudgets, StreamLimits
from bookie_server.listening import bind_port, check_port_free, grpc_server_options, listen_address
from bookie_server.memory import BurstTrimmer
from bookie_server.metrics import BookieMetrics
from bookie_server.registration import bookie_info, deregister, register
from bookie_server.service import BookieServicer
from pyspark_ledger.errors import InvalidConfigurationError, JournalCorruptError, LedgerError, StorageError
from pyspark_ledger.metadata.bookie_location import Location

_log = logging.getLogger(__name__)
BOOKIE_SERVICE_NAME = "pyspark_ledger.wire.v1.Bookie"
EXTRA_STOP_WAIT_S = 5.0


class BookieServer:
    """One bookie: start() brings it up, stop() takes it down gracefully."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.bookie_id = config.effective_bookie_id
        self.address = listen_address(config.host, config.port)
        self.metrics = BookieMetrics()
        self.metrics_port: int | None = None
        self._store = None
        self._cookie_plan = None
        self._storage = None
        self._executor: ThreadPoolExecutor | None = None
        self._grpc: grpc.Server | None = None
        self._servicer: BookieServicer | None = None
        self._health: health.HealthServicer | None = None
        self._trimmer: BurstTrimmer | None = None
        self._registration = None
        self._space_report = None  # keeps the registration's disk space current
        self._disk_monitor = None
        self._storage_watch = None
        self._read_only_reasons: dict[str, str] = {}  # "disk" / "storage" -> why the bookie takes no adds
        self._state_lock = threading.Lock()
        self._serving = False
        self._gc = None
        self._framed = None  # the framed add port's listener (--add-port), or None
        self.add_port: int | None = None
        self._stopped = False

    @property
    def metrics_url(self) -> str | None:
        if self.metrics_port is None:
            return None
        scheme = "https" if self.config.tls is not None else "http"
        return f"{scheme}://{listen_address(self.config.advertised_host, self.metrics_port)}/metrics"

    # --- start -------------------------------------------------------------------
    def start(self) -> None:
        try:
            check_port_free(self.config.host, self.config.port)
            self._open_metadata()
            self._open_storage()
            self._build_grpc()
            self._guard_new_ledgers()
            if self.config.metrics_port >= 0:
                self._serve_metrics()
            self._grpc.start()
            self._serve_framed_adds()
            self._cookie_plan.commit()  # only now: a start that failed before changed no cookie
            self._watch_disks()
            self._register()
            if self._disk_monitor is not None:
                self._disk_monitor.start()
            self._storage_watch.start()
            self._start_gc()
        except BaseException:
            self._close_resources()
            raise
        with self._state_lock:
            self._serving = True
            self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING if self._read_only_reasons
                             else health_pb2.HealthCheckResponse.SERVING)
        _log.info("bookie %s serving on %s (metrics %s)", self.bookie_id, self.address, self.metrics_url or "off")

    def _open_metadata(self) -> None:
        from pyspark_ledger.metadata import open_metadata_store

        self._store = open_metadata_store(self.config.metadata_uri, create=True)  # a first start creates it
        self._cookie_plan = plan_cookie(self._store, self.config.data_dir, self.bookie_id,
                                        self.config.allow_new_data_dir, self.config.adopt_metadata_store)

    def _open_storage(self) -> None:
        from bookie_server.disk_monitor import release_reserve
        from bookie_server.storage_watch import DISK_FULL, StorageHandle, StorageWatch, failure_cause

        config = self.config
        reserve_note = None
        try:
            storage = self._new_storage()
        except StorageError as exc:
            released = release_reserve(config.data_dir) if failure_cause(exc) == DISK_FULL else 0
            if not released:
                raise
            reserve_note = (f"the disk of {config.data_dir} was too full to replay the journal; released the "
                            f"{released}-byte disk reserve (--disk-reserve) to start")
            _log.warning("%s", reserve_note)
            storage = self._new_storage()
        with self._state_lock:
            storage.set_read_only(self._storage_read_only_reason())
            self._storage = StorageHandle(storage)
        directories = [config.data_dir] + ([config.journal_dir] if config.journal_dir is not None else [])
        self._storage_watch = StorageWatch(self._storage, directories, config.disk_usage_lwm,
                                           self._storage_changed, self._reopen_storage)
        storage.on_failure = self._storage_watch.poke
        if reserve_note is not None:
            self._storage_watch.mark_failed(DISK_FULL, reserve_note)
        else:
            self._make_reserve()

    def _new_storage(self):
        """Open the storage (replaying the journal); a clear StorageError if it cannot be."""
        from bookie_server.storage import BookieStorage
        from bookie_server.storage_watch import DISK_FULL, failure_cause

        config = self.config
        try:
            storage = BookieStorage(config.storage_config(), on_journal_sync=self.metrics.journal_synced)
        except JournalCorruptError:
            raise  # its message names the file, the offset and --skip-journal-corruption
        except (OSError, StorageError) as exc:
            full = failure_cause(exc) == DISK_FULL
            error = StorageError(
                f"cannot open storage in {config.data_dir}: {exc}" + (
                    "; the disk is too full to replay the journal: free space on it (the disk reserve, "
                    "--disk-reserve, is used up or off)" if full else ""))
            raise error from exc
        self.metrics.damage_found("journal", storage.damage_found())
        return storage

    def _reopen_storage(self) -> None:
        """The storage watch's way back after a full disk: close the failed storage and open it again."""
        old = self._storage.target
        old.close()
        new = self._new_storage()
        new.on_failure = self._storage_watch.poke
        with self._state_lock:  # a disk monitor verdict meanwhile goes to the new storage too
            new.set_read_only(self._storage_read_only_reason())
            self._storage.target = new
        self._make_reserve()

    def _make_reserve(self) -> None:
        from bookie_server.disk_monitor import create_reserve

        if self.config.disk_reserve_bytes > 0:
            create_reserve(self.config.data_dir, self.config.disk_reserve_bytes)

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
                              idle_timeout_s=config.add_stream_idle_timeout_s,
                              answer_runs=config.add_answer_runs)
        self._trimmer = BurstTrimmer(budgets.inflight_bytes, on_trim=self.metrics.memory_trimmed)
        self._servicer = BookieServicer(self._storage, self.metrics, bookie_id=self.bookie_id,
                                        version=pyspark_ledger.__version__, limits=limits, budgets=budgets,
                                        is_read_only=self._is_read_only, on_bytes_freed=self._trimmer.bytes_freed,
                                        authority=Authority(config.admin_identities))
        register_bookie_service(self._servicer, self._grpc)  # AddStream's batches decoded by add_wire
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        bind_port(self._grpc, self.address, self.config.port, self.config.tls)

    def _guard_new_ledgers(self) -> None:
        """First adds and fences of unknown ledgers are checked against the metadata store (issue 12, part 7)."""
        from bookie_server.ledger_guard import LedgerGuard, metadata_lookup

        if not self.config.verify_new_ledgers:
            _log.warning("--no-verify-new-ledgers: any caller may create (or fence) a ledger on this bookie with "
                         "any key, locking its writer out")
            return
        storage = self._storage  # a StorageHandle: the storage behind it may be reopened
        self._servicer.ledger_guard = LedgerGuard(metadata_lookup(self._store),
                                                  lambda ledger_id: storage.has_ledger(ledger_id), self.bookie_id)

    def _serve_metrics(self) -> None:
        try:
            self.metrics_port = self.metrics.serve_http(self.config.host, self.config.metrics_port,
                                                        tls=self.config.tls)
        except OSError as exc:
            raise InvalidConfigurationError(
                f"cannot serve metrics on {self.config.host}:{self.config.metrics_port}: {exc}; "
                "pick another --metrics-port (0 = any free port)") from exc

    def _serve_framed_adds(self) -> None:
        """The framed add port (``--add-port``, docs/protocol.md W11), if on: the same AddStream handler as gRPC's."""
        from bookie_server.framed_listener import open_framed_listener

        self._framed = open_framed_listener(self.config, self._servicer, self.metrics, self.bookie_id)
        if self._framed is not None:
            self.add_port = self._framed.port
            self._framed.start()

    def _register(self) -> None:
        from bookie_server.space_report import SpaceReport, measure_space

        storage_config = self.config.storage_config()
        self._space_report = SpaceReport(lambda: measure_space(storage_config.journal_dir,
                                                               storage_config.entry_log_dir))
        config = self.config
        info = self._space_report.info(bookie_info(config.advertised_host, config.dial_port, self.metrics_port,
                                                   self.metrics_url, str(config.data_dir), tls=config.tls,
                                                   location=Location(config.zone, config.rack),
                                                   add_port=self.add_port or 0))
        with self._state_lock:
            read_only = bool(self._read_only_reasons)
            self._registration = register(self._store, self.bookie_id, info, read_only=read_only)
        self._space_report.start(self._registration)

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
        from bookie_server.store_record import read_store_record

        config = self.config
        if config.gc_interval_s <= 0:
            _log.info("garbage collection off (--gc-interval 0): deleted ledgers keep their data here")
            return
        wait = config.gc_overreplicated_wait_s or None
        self._gc = GarbageCollector(self._storage, self._store, config.gc_interval_s,
                                    config.gc_compaction_threshold, self.metrics, bookie_id=self.bookie_id,
                                    overreplicated_wait_s=wait,
                                    store_instance_id=read_store_record(config.data_dir) or "")
        self._gc.start()
        _log.info("garbage collection every %.1f s (compaction threshold %.2f, over-replicated ledgers after %s)",
                  config.gc_interval_s, config.gc_compaction_threshold, f"{wait:g} s" if wait else "never")

    def _disk_changed(self, read_only: bool, reason: str) -> None:
        """The disk monitor's verdict: refuse or take adds, and register as read-only or writable."""
        self._set_reason("disk", reason if read_only else None)

    def _storage_changed(self, reason: str | None) -> None:
        """The storage watch's verdict: failed (reason) or working again (None)."""
        self._set_reason("storage", reason)

    def _set_reason(self, source: str, reason: str | None) -> None:
        with self._state_lock:
            if reason is None:
                self._read_only_reasons.pop(source, None)
            else:
                self._read_only_reasons[source] = reason
        self._update_write_state()

    def _update_write_state(self) -> None:
        """Make storage, registration and health agree with the read-only reasons (raises if the metadata
        store cannot be written: the caller retries)."""
        with self._state_lock:
            read_only = bool(self._read_only_reasons)
            storage, registration = self._storage, self._registration
            if storage is not None:
                storage.set_read_only(self._storage_read_only_reason())
            if self._health is not None and self._serving:
                self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING if read_only
                                 else health_pb2.HealthCheckResponse.SERVING)
            if registration is not None:
                registration.set_read_only(read_only)

    def _storage_read_only_reason(self) -> str | None:
        """Why the storage refuses adds READ_ONLY (a failed storage answers IO_ERROR before that); lock held."""
        return "; ".join(self._read_only_reasons.values()) or None

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
        if self._framed is not None:
            self._framed.close()  # no new framed streams; the open ones drain with gRPC's
        if self._grpc is not None:
            stopped = self._grpc.stop(grace)
            if not self._servicer.drain(grace):
                _log.warning("add streams still open after the %.1f s grace period; cancelling them", grace)
            if self._framed is not None:
                self._framed.shut_open_connections()
            stopped.wait(grace + EXTRA_STOP_WAIT_S)
            self._servicer.join_stream_threads(EXTRA_STOP_WAIT_S)
        self._close_resources()
        _log.info("bookie %s stopped", self.bookie_id)

    def _close_resources(self) -> None:
        """Close whatever start() opened, in shutdown order; every step runs even if one fails."""
        self._stopped = True
        self._serving = False
        if self._storage_watch is not None:
            self._storage_watch.stop()
        if self._disk_monitor is not None:
            self._disk_monitor.stop()
        if self._space_report is not None:
            self._space_report.stop()
        if self._gc is not None:
            self._gc.stop()
        if self._framed is not None:
            self._framed.close()
            self._framed.shut_open_connections()
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
