"""Servers of the bookie's gRPC protocol that acknowledge every add at once and store nothing.

The benchmarks measure gRPC's own share against them: ``start_noop_servers(n)``
starts ``n`` of them as processes on free 127.0.0.1 ports (``python
bench/noop_bookies.py PORT`` is one), and ``noop_registrations`` registers
them as bookies in a SQLite metadata store so that a ``LedgerClient`` or a
``GrpcTransport`` can use them. The caller kills the processes (``stop_servers``). ``serve`` and
``start_servers`` also start the durable fan-out's servers (``durable_bookies.py``). ``serve`` with
``framed`` also serves the servicer on a framed add port (docs/protocol.md W11) through the bookie's own
``FramedListener``, so a limit can take the transport our adds take; its ready line names the port, which
``start_servers`` keeps as the process's ``add_port`` (0 for none) and ``noop_registrations`` registers, given
``add_ports``, as the bookie's ``add_port``. ``serve`` tunes the process's malloc as a bookie's start does
(``bookie_server.memory.keep_freed_memory``): a limit must not pay costs a bookie was spared.
"""
from __future__ import annotations

import contextlib
import operator
import subprocess
import sys
from concurrent import futures as cf
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402

from bookie_server.config import DEFAULT_MAX_INFLIGHT_BYTES  # noqa: E402
from bookie_server.framed_listener import FramedListener  # noqa: E402
from bookie_server.config import DEFAULT_MAX_BATCH_ADDS, DEFAULT_MAX_BATCH_BYTES  # noqa: E402
from bookie_server.limits import arriving_frames_bytes  # noqa: E402
from bookie_server.memory import keep_freed_memory  # noqa: E402
from bookie_server.listening import grpc_server_options  # noqa: E402
from pyspark_ledger.metadata import open_metadata_store  # noqa: E402
from pyspark_ledger.testing.bookies import child_env, free_port  # noqa: E402
from pyspark_ledger.wire.ack_runs import RunBuilder, asks_for_runs  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2 as pb  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc  # noqa: E402


_LEDGER_ID, _ENTRY_ID = operator.attrgetter("ledger_id"), operator.attrgetter("entry_id")


class NoopBookie(pb_grpc.BookieServicer):
    """Acknowledges every add at once and stores nothing; in runs (docs/protocol.md W9) to a client that asks, as
    a bookie does (the cheaper form for any server, so the floor uses it too)."""

    def AddStream(self, request_iterator, context):
        if asks_for_runs(context.invocation_metadata()):
            builder = RunBuilder()
            for batch in request_iterator:
                adds = batch.adds
                builder.acked(list(map(_LEDGER_ID, adds)), list(map(_ENTRY_ID, adds)))
                yield from builder.messages()
            return
        for batch in request_iterator:
            yield pb.AddResultBatch(results=[pb.AddResult(ledger_id=a.ledger_id, entry_id=a.entry_id, status=pb.OK)
                                             for a in batch.adds])

    def WriteLac(self, request, context):
        return pb.WriteLacResponse(status=pb.OK, last_add_confirmed=request.last_add_confirmed)

    def Info(self, request, context):
        return pb.BookieInfoResponse(status=pb.OK, bookie_id="noop")


# The bookies' keepalive settings (bookie_server/listening.py): without them the client's 10 s keepalive pings
# during a long idle stretch draw GOAWAY "too_many_pings", and the fan-out run waits on a dead stream.
KEEPALIVE_OPTIONS = [(name, value) for name, value in grpc_server_options(1, 1)
                     if "keepalive" in name or "ping" in name]


class _NoMetrics:
    """The framed listener's metrics, counted nowhere (a bench server has no /metrics)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


FRAMED_CONNECTIONS = 64
FRAMED_MAX_FRAME_BYTES = 64 << 20


def serve(servicer: pb_grpc.BookieServicer, port: int, framed: bool = False, reads: bool = False) -> None:
    """Serve ``servicer`` on 127.0.0.1:``port`` until killed, with ``framed`` also on a framed add port (any free
    one), which with ``reads`` takes read connections too (docs/protocol.md W12: ``servicer.Read`` answers them);
    prints "ready" (and "add_port=N") once it listens."""
    keep_freed_memory()  # as ``bookie_server.__main__`` does for a bookie
    server = grpc.server(cf.ThreadPoolExecutor(max_workers=8),
                         options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
                                  *KEEPALIVE_OPTIONS])
    pb_grpc.add_BookieServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    ready = "ready"
    if framed:
        listener = FramedListener(servicer, _NoMetrics(), f"127.0.0.1:{port}", "127.0.0.1", 0, FRAMED_CONNECTIONS,
                                  FRAMED_MAX_FRAME_BYTES, None,  # large frames received as a bookie's defaults do:
                                  arriving_frames_bytes(DEFAULT_MAX_INFLIGHT_BYTES, FRAMED_MAX_FRAME_BYTES),
                                  DEFAULT_MAX_BATCH_ADDS, DEFAULT_MAX_BATCH_BYTES,  # frames merged, as a bookie does
                                  max_read_connections=FRAMED_CONNECTIONS if reads else 0)
        listener.start()
        ready += f" add_port={listener.port}"
    print(ready, flush=True)
    server.wait_for_termination()


def start_servers(count: int, command) -> list[tuple[subprocess.Popen, int]]:
    """``count`` server processes, each ``command(port)`` (an argv) on a free port, once all are ready; each
    process's ``add_port`` is the framed add port its ready line named, else 0."""
    servers = []
    try:
        for _ in range(count):
            port = free_port()
            process = subprocess.Popen(command(port), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                       env=child_env(), text=True)
            servers.append((process, port))
        for process, _ in servers:
            words = process.stdout.readline().split()
            if not words or words[0] != "ready":
                raise RuntimeError(f"a server did not start: {command(0)}")
            named = dict(word.split("=", 1) for word in words[1:] if "=" in word)
            process.add_port = int(named.get("add_port", 0))
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: list[tuple[subprocess.Popen, int]]) -> None:
    for process, _ in servers:
        process.kill()
        process.wait()


def start_noop_servers(count: int, framed: bool = False) -> list[tuple[subprocess.Popen, int]]:
    """``count`` no-op servers; with ``framed`` each also on a framed add port (its process's ``add_port``)."""
    return start_servers(count, lambda port: [sys.executable, __file__, str(port), *(["--framed"] if framed else [])])


@contextlib.contextmanager
def noop_registrations(ports: list[int], directory: Path, name: str, add_ports: dict[int, int] | None = None):
    """A SQLite metadata store (its URI) in which the servers on ``ports`` are registered as bookies, with the
    framed add port ``add_ports`` gives for a port (none by default: adds then take gRPC)."""
    uri = f"sqlite:///{directory}/noop-metadata-{name}.db?lease_seconds=30"
    store = open_metadata_store(uri, create=True)  # a new store for the no-op bookies
    framed = add_ports or {}
    registrations = [store.register_bookie(f"127.0.0.1:{port}",
                                           {"host": "127.0.0.1", "port": port, "add_port": framed.get(port, 0)})
                     for port in ports]
    try:
        yield uri
    finally:
        for registration in registrations:
            registration.close()
        store.close()


if __name__ == "__main__":
    serve(NoopBookie(), int(sys.argv[1]), framed=sys.argv[2:3] == ["--framed"])
