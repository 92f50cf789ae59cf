"""The ``bookie-server`` command (also ``python -m bookie_server``).

Exit status: 0 after a clean stop (SIGTERM/SIGINT), 1 when the bookie cannot
start (one line on stderr says why), 2 for invalid flags. Once serving it
prints one line to stdout::

    bookie 127.0.0.1:3181 ready address=127.0.0.1:3181 metrics=http://127.0.0.1:9000/metrics

With ``--exit-with-parent`` it also stops (gracefully, as on SIGTERM) once
the process that started it is gone, even if that one was killed: a sandbox
in a notebook kernel that died leaves no bookie behind.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from typing import Sequence

from bookie_server.config import configure_logging, parse_args
from pyspark_ledger.errors import LedgerError

_log = logging.getLogger("bookie_server")
PARENT_CHECK_INTERVAL_S = 0.5


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    configure_logging(config.log_level)
    from bookie_server.memory import keep_freed_memory
    from bookie_server.python_heap import freeze_start_up_objects, watch_collections
    from bookie_server.server import BookieServer  # late: keeps --help and flag errors fast

    keep_freed_memory()  # entry bodies pass through megabyte buffers: reuse them (see bookie_server.memory)
    server = BookieServer(config)
    stop_requested = threading.Event()
    _install_signal_handlers(stop_requested)
    if config.exit_with_parent:
        _watch_parent(os.getppid(), stop_requested)
    try:
        server.start()
    except (LedgerError, OSError) as exc:
        print(f"bookie-server: bookie {server.bookie_id} cannot start: {exc}", file=sys.stderr, flush=True)
        return 1
    # start-up objects out of the collector's full passes (bookie_server.python_heap), its pauses in the metrics
    server.metrics.python_heap_frozen(freeze_start_up_objects())
    watch_collections(server.metrics.python_gc_paused)
    metrics = server.metrics_url or "off"
    add_port = server.add_port or "off"
    print(f"bookie {server.bookie_id} ready address={server.address} metrics={metrics} add_port={add_port}",
          flush=True)
    stop_requested.wait()
    _log.info("bookie %s received a stop signal", server.bookie_id)
    server.stop()
    for signum in (signal.SIGTERM, signal.SIGINT):  # a repeated stop signal must not turn exit 0 into a kill
        signal.signal(signum, signal.SIG_IGN)
    return 0


def _watch_parent(parent_pid: int, stop_requested: threading.Event) -> None:
    """Request a stop once this process is re-parented (its parent ended)."""
    def watch() -> None:
        while not stop_requested.wait(PARENT_CHECK_INTERVAL_S):
            if os.getppid() != parent_pid:
                _log.warning("the process that started this bookie (pid %d) is gone: stopping", parent_pid)
                stop_requested.set()

    threading.Thread(target=watch, name="bookie-parent-watch", daemon=True).start()


def _install_signal_handlers(stop_requested: threading.Event) -> None:
    def request_stop(_signum, _frame) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` dumps every thread's stack


if __name__ == "__main__":
    sys.exit(main())
