"""One client per Python process: the ``StreamClient`` / ``LedgerClient`` cache of Spark's workers.

Spark runs the data source's code in Python worker processes that it reuses
across tasks (and, on the driver, in long-lived planner and streaming-source
processes). Opening a metadata store and a gRPC client per task or per input
partition would cost connections and threads each time, so this module keeps,
per process:

* one ``LedgerClient`` (and the metadata store it owns) per metadata URI, TLS setting and zone demand, and
* one ``StreamClient`` per (URI, TLS setting, zone demand, password) built over that shared client.

The TLS setting is the query's ``tlsCa``/``tlsCert``/``tlsKey`` options (a ``ClientTls``), or ``None``:
then the client takes ``LEDGER_TLS_*`` from this process's environment (``ClientConfig``'s default).
The zone demand is a write's ``minAckQuorumZones`` option (``ClientConfig.min_ack_quorum_zones``; 1 for
reads and by default).

The clients use the replication client's defaults except for speculative
reads (``executor_config``): tasks read whole entry ranges, megabytes per
request, which on a busy machine take longer than the default 50 ms before a
read is also sent to the next replica. Every batch of a Spark read was then
fetched from two or three replicas (docs/measurements.md, "Speculative reads
on Spark executors"), and the duplicate answers cost the bookies and the
workers CPU that the read itself needed. The executors wait ``SPECULATIVE_READ_DELAY_S`` (BookKeeper's default
speculative read timeout) before asking another replica; a replica that fails
outright is still replaced at once.

``stream_client(uri, password)`` and ``ledger_client(uri, password)`` return
them, creating them on first use (thread-safe). They are closed at interpreter
exit (``atexit``) or by ``close_all(uri=None)``; a client is never closed by a task,
since the next task of the same worker reuses it. A forked child (Spark's
daemon forks its workers) does not inherit the parent's clients: their threads
do not survive a fork, so the child starts with an empty cache.

Spark's daemon runs ``gc.collect()`` in a reused worker after every task. A
worker that has imported this package (pyarrow, gRPC, protobuf, asyncio) and
opened a client holds tens of thousands of objects that the collector walks
each time, at a cost comparable to the task's own reading
(docs/measurements.md, "gc.freeze() in reused Spark workers"). So when a
reused worker (``SPARK_REUSE_WORKER`` set) asks for a client (every task does,
at its start) and modules were imported since the last freeze -- the first
time, and after a task whose work imported more (a first read imports the
reader's modules and zipimport's directory of Spark's zipped Python, about
60,000 objects, after the first client exists) -- garbage is collected and
the objects alive then are frozen (``gc.freeze()``): later collections only
look at what tasks create. What is frozen is never collected, so this happens
only in Spark's reused workers and only when the imports grew: a few times
per process, since a module is imported once.

A reading task receives its entries in answers of up to 8 MiB (``bytes`` made
by gRPC on the client's network thread), several alive at once while their
Arrow batches go to the JVM. With glibc's defaults each freed answer went back
to the kernel and the next faulted its pages in again: a third of the workers'
CPU (docs/measurements.md, "Spark reads: freed answers kept for reuse"). So a
reused worker, at its first client, raises glibc's mmap and trim thresholds to
``WORKER_MALLOC_THRESHOLD`` (``pyspark_ledger.malloc_tuning``; not where the
environment chose them): up to that much free memory stays with each malloc
arena of the worker for the next answers, about 50 MiB more resident memory
per reading worker.
"""
from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

from pyspark_ledger.errors import InvalidConfigurationError, LedgerError, NoSuchMetadataStoreError

if TYPE_CHECKING:  # imported lazily: this module must stay cheap to import
    from pyspark_ledger.client.ledger_client import LedgerClient
    from pyspark_ledger.log.stream_client import StreamClient
    from pyspark_ledger.metadata.store import MetadataStore

log = logging.getLogger(__name__)

#: Seconds before a slow read is also sent to the entry's next replica (see the module docstring).
SPECULATIVE_READ_DELAY_S = 2.0

#: How the cached StreamClients' errors name a password that is not the stream's.
PASSWORD_OPTION = "option password"

#: Set by Spark in the environment of Python workers that serve task after task.
REUSED_WORKER_ENV = "SPARK_REUSE_WORKER"
#: glibc's mmap and trim thresholds in a reused worker: room for the read answers in flight (module docstring).
WORKER_MALLOC_THRESHOLD = 32 * 1024 * 1024

_lock = threading.Lock()
_frozen_at: tuple[int, int] | None = None  # (process id, len(sys.modules)) at the last freeze
_tuned_pid: int | None = None  # the process whose malloc thresholds were raised
_owner_pid = os.getpid()
_ledger_clients: dict[tuple, tuple["MetadataStore", "LedgerClient"]] = {}
_stream_clients: dict[tuple, "StreamClient"] = {}


def ledger_client(uri: str, password: bytes | str = b"", tls=None, min_ack_quorum_zones: int = 1) -> "LedgerClient":
    """This process's replication client for the metadata service ``uri``.

    ``password`` is accepted for symmetry with ``stream_client`` (ledger
    passwords are given per call to the client, so one client serves them all).
    """
    _check_password(password)
    with _lock:
        _forget_if_forked()
        client = _ledger_client_locked((_check_uri(uri), tls, min_ack_quorum_zones))[1]
        _tune_reused_worker()
        return client


def stream_client(uri: str, password: bytes | str = b"", tls=None, min_ack_quorum_zones: int = 1) -> "StreamClient":
    """This process's ``StreamClient`` for ``uri`` (reached with ``tls``, placing ledgers so that every ack quorum
    spans ``min_ack_quorum_zones`` zones) whose ledgers use ``password``."""
    key = (_check_uri(uri), tls, min_ack_quorum_zones, _check_password(password))
    with _lock:
        _forget_if_forked()
        cached = _stream_clients.get(key)
        if cached is None:
            from pyspark_ledger.log.stream_client import StreamClient
            store, client = _ledger_client_locked(key[:3])
            cached = StreamClient(store, password=key[3], client=client, password_name=PASSWORD_OPTION)
            _stream_clients[key] = cached
        _tune_reused_worker()
        return cached


def executor_config(tls=None, min_ack_quorum_zones: int = 1):
    """The ``ClientConfig`` of the cached clients: the defaults, with range-read-sized speculation, the zone
    demand, and ``tls`` if given (else the environment's)."""
    from dataclasses import replace

    from pyspark_ledger.client.config import ClientConfig
    config = replace(ClientConfig(), speculative_read_delay_s=SPECULATIVE_READ_DELAY_S,
                     min_ack_quorum_zones=min_ack_quorum_zones)
    return config if tls is None else replace(config, tls=tls)


def cached_clients() -> int:
    """How many replication clients this process holds (for tests and diagnostics)."""
    with _lock:
        _forget_if_forked()
        return len(_ledger_clients)


def close_all(uri: str | None = None) -> None:
    """Close the cached clients of ``uri`` (default: all of them); idempotent.

    The next call to a getter opens new ones.
    """
    with _lock:
        _forget_if_forked()
        wanted = None if uri is None else _check_uri(uri)
        keys = [key for key in _ledger_clients if wanted is None or key[0] == wanted]
        uris = {key[0] for key in keys}
        clients = [_ledger_clients.pop(key) for key in keys]
        for key in [key for key in _stream_clients if key[0] in uris]:
            del _stream_clients[key]
    for store, client in clients:
        for close in (client.close, store.close):
            try:
                close()
            except LedgerError:
                log.warning("closing a cached client of %s failed", store.uri, exc_info=True)


def _ledger_client_locked(key: tuple) -> tuple["MetadataStore", "LedgerClient"]:
    """The cached client of ``key`` = (uri, tls, min_ack_quorum_zones), made on first use."""
    uri, tls, zones = key
    cached = _ledger_clients.get(key)
    if cached is None:
        from pyspark_ledger.client.ledger_client import LedgerClient
        from pyspark_ledger.metadata import open_metadata_store
        try:
            store = open_metadata_store(uri)
        except NoSuchMetadataStoreError as exc:
            raise _no_store_here(uri, exc) from exc
        try:
            cached = (store, LedgerClient(store, executor_config(tls, zones)))
        except BaseException:
            store.close()
            raise
        _ledger_clients[key] = cached
    return cached


def _tune_reused_worker() -> None:
    """In a reused Spark worker: raise the malloc thresholds once per process, and when modules were imported
    since the last freeze, collect, then freeze what is left, so that Spark's gc.collect() after every task walks
    only what tasks create (module docstring)."""
    global _frozen_at, _tuned_pid
    if not os.environ.get(REUSED_WORKER_ENV):
        return
    now = (os.getpid(), len(sys.modules))
    if _tuned_pid != now[0]:
        _tuned_pid = now[0]
        from pyspark_ledger.malloc_tuning import raise_thresholds
        raise_thresholds(WORKER_MALLOC_THRESHOLD, WORKER_MALLOC_THRESHOLD)
        now = (now[0], len(sys.modules))  # that import counts before the freeze below
    if _frozen_at != now:
        _frozen_at = now
        gc.collect()  # what is garbage now must not be frozen with the rest
        gc.freeze()


def _forget_if_forked() -> None:
    """Drop (without closing) clients created by a parent process before a fork."""
    global _owner_pid
    pid = os.getpid()
    if pid != _owner_pid:
        _ledger_clients.clear()
        _stream_clients.clear()
        _owner_pid = pid


def _no_store_here(uri: str, exc: NoSuchMetadataStoreError) -> LedgerError:
    """A missing SQLite file, said so that a Spark executor on another host than the file explains itself (the
    same class: there is no store at that URI here)."""
    if not uri.startswith("sqlite:"):
        return exc
    import socket
    return NoSuchMetadataStoreError(
        f"{exc} (metadataServiceUri {uri!r}, on host {socket.gethostname()}, where this runs). A sqlite:/// metadata "
        "store is a file on one host: Spark executors on other hosts (a cluster master: spark://, yarn, k8s) cannot "
        "open it. On a cluster use ZooKeeper metadata (zk://host:port[,host:port...]/chroot), reachable from the "
        "driver and every executor; see docs/cluster.md")


def _check_uri(uri: str) -> str:
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidConfigurationError(f"metadataServiceUri must be a non-empty metadata URI such as "
                                        f"'sqlite:///abs/path/meta.db' or 'zk://host:port/chroot', got {uri!r}")
    return uri.strip()


def _check_password(password: bytes | str) -> bytes:
    if isinstance(password, str):
        return password.encode()
    if isinstance(password, (bytes, bytearray)):
        return bytes(password)
    raise InvalidConfigurationError(f"password must be bytes or str, got {type(password).__name__}")


atexit.register(close_all)
