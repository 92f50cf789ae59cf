"""The bare fetch: a stream's entries fetched from 3 servers that hold them in memory, nothing more.

The read-side twin of the no-op fan-out (``bench/noop_bookies.py``): what any reader of a ledger stream
pays to bring its bytes over the bookie's protocol, on the transport the client's range reads take (the framed
port's read connections, docs/protocol.md W12), before any client logic (no digest check, no read-ahead
bookkeeping, no Arrow decoding) and before any storage (no index, no entry log, no page cache).

``bare_fetch(uri, spans, repeats)`` starts 3 server processes (``python bench/bare_fetch.py serve ...``):
server ``k`` loads, from the stream's real bookies, the encoded entries ``k, k + 3, k + 6, ...`` of every
``ledger:last`` span (the bytes a bookie stores and sends, each entry held by one server), then answers
the protocol's ``Read`` with ``entry_step`` 3 from memory, encoded as the bookie encodes a read answer
(``bookie_server.read_wire``: one copy of each body), on a framed port served by the bookie's own listener
(``bookie_server.framed_listener``, ``framed_reads``). A fresh fetching process (``... fetch ...``) then
reads every entry once, ``repeats`` times: one thread per server on one read connection, range reads of at
most the client's ``read_batch_bytes`` (8 MiB), each answer received whole into one ``bytes`` (no copy but the
kernel's) and decoded in place as the client decodes it (``client.read_wire``). It reports
the CPU seconds of the fetching process and of each server per run (loading is not counted), and the run
that cost the least CPU and the fastest run: a limit takes each part's cheapest figure.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent import futures as cf
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc  # noqa: E402

from cpu_usage import cpu_seconds  # noqa: E402
from pyspark_ledger.testing.bookies import child_env, free_port  # noqa: E402
from pyspark_ledger.wire import frames  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2 as pb  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc  # noqa: E402

SERVERS = 3
MiB = 1024 * 1024
READ_BATCH_BYTES = 8 * MiB  # the client's read_batch_bytes default (ClientConfig)
_UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def _parse_spans(spans: list[str]) -> list[tuple[int, int]]:
    return [tuple(map(int, span.split(":"))) for span in spans]  # type: ignore[misc]


class _InMemoryBookie(pb_grpc.BookieServicer):
    """Answers range reads from ``entries`` ({(ledger, entry): body}), as a bookie encodes them."""

    def __init__(self, entries: dict[tuple[int, int], bytes]) -> None:
        self.entries = entries

    def Read(self, request, context):
        from bookie_server.read_wire import read_response

        step, limit = max(request.entry_step, 1), request.max_bytes or READ_BATCH_BYTES
        found, size = [], 0
        for entry_id in range(request.first_entry_id, request.last_entry_id + 1, step):
            body = self.entries.get((request.ledger_id, entry_id))
            if body is None or (found and size + len(body) > limit):
                break
            found.append((entry_id, body))
            size += len(body)
        return read_response(pb.OK, "", found, -1, found[-1][0] if found else -1, False)


def _load(uri: str, index: int, spans: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """Entries index, index + 3, ... of each span, as encoded, from the stream's first bookie."""
    from pyspark_ledger.entry import master_key
    from pyspark_ledger.metadata import open_metadata_store

    with open_metadata_store(uri) as store:
        info = next(iter(store.bookies().values())).info
    entries = {}
    with grpc.insecure_channel(f"{info['host']}:{info['port']}", options=_UNLIMITED) as channel:
        stub = pb_grpc.BookieStub(channel)
        for ledger_id, last in spans:
            first = index
            while first <= last:
                answer = stub.Read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last,
                                                  master_key=master_key(b""), entry_step=SERVERS,
                                                  max_bytes=READ_BATCH_BYTES), timeout=120)
                if answer.status != pb.OK or not answer.entries:
                    raise RuntimeError(f"loading ledger {ledger_id} entry {first} failed: {answer.status} "
                                       f"{answer.message}")
                for entry in answer.entries:
                    entries[(ledger_id, entry.entry_id)] = entry.body
                first = answer.entries[-1].entry_id + SERVERS
    return entries


def serve(port: int, uri: str, index: int, spans: list[str]) -> None:
    """Child: load this server's entries, serve them on 127.0.0.1:``port`` and on a framed port taking read
    connections, print ``ready add_port=N``."""
    from noop_bookies import serve as serve_both

    serve_both(_InMemoryBookie(_load(uri, index, _parse_spans(spans))), port, framed=True, reads=True)


class _ReadConnection:
    """One blocking read connection to a framed port (docs/protocol.md W12): a READ, then its READ_ANSWER."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.settimeout(None)  # blocking: MSG_WAITALL then waits for the whole frame (a timeout makes it partial)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(frames.hello(frames.VERSION, frames.READS))
        kind, payload = self._frame()
        if kind is not frames.Kind.WELCOME or not frames.parse_welcome(payload, frames.READS)[1] & frames.READS:
            raise RuntimeError(f"the bare fetch server on port {port} took no read connection: {kind.name}")
        self._ids = 0

    def _frame(self) -> tuple[frames.Kind, bytes]:
        length, kind = frames.HEADER.unpack(self._exactly(frames.HEADER.size))
        return frames.Kind(kind), self._exactly(length - 1)

    def _exactly(self, size: int) -> bytes:
        data = self.sock.recv(size, socket.MSG_WAITALL)  # into a new bytes of the frame's size, filled by the kernel
        if len(data) != size:
            raise RuntimeError("a bare fetch server closed its read connection")
        return data

    def __call__(self, request, timeout: float):
        from pyspark_ledger.client.read_wire import decode_read_response

        self._ids += 1
        self.sock.sendall(frames.read_frame(self._ids, request.SerializeToString()))
        kind, payload = self._frame()
        if kind is not frames.Kind.READ_ANSWER:
            raise RuntimeError(f"a bare fetch server answered a READ with {kind.name}")
        request_id, message = frames.split_request_id(payload)
        if request_id != self._ids:
            raise RuntimeError(f"a bare fetch server answered READ {self._ids} as {request_id}")
        return decode_read_response(message)

    def close(self) -> None:
        self.sock.close()


def _fetch_from(read, index: int, spans: list[tuple[int, int]]) -> int:
    """Entry bytes of entries index, index + 3, ... of every span, read with ``read`` (one server's Read)."""
    fetched = 0
    for ledger_id, last in spans:
        first = index
        while first <= last:
            answer = read(pb.ReadRequest(ledger_id=ledger_id, first_entry_id=first, last_entry_id=last,
                                         entry_step=SERVERS, max_bytes=READ_BATCH_BYTES), timeout=120)
            if answer.status != pb.OK or not answer.entries:
                raise RuntimeError(f"the bare fetch of ledger {ledger_id} entry {first} failed")
            fetched += sum(len(entry.body) for entry in answer.entries)
            first = answer.entries[-1].entry_id + SERVERS
    return fetched


def fetch(ports: list[int], spans: list[str], repeats: int, server_pids: dict[str, int]) -> dict:
    """Child: every entry once per run, one thread per server (module docstring); CPU by process per run."""
    parsed = _parse_spans(spans)
    pids = {"fetcher": os.getpid(), **server_pids}
    reads = [_ReadConnection(port) for port in ports]
    for index, read in enumerate(reads):  # connect, warm up: each server's first entry
        if index <= parsed[0][1]:
            _fetch_from(read, index, [(parsed[0][0], index)])
    runs = []
    for _run in range(repeats):
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        with cf.ThreadPoolExecutor(SERVERS) as pool:
            fetched = sum(pool.map(lambda args: _fetch_from(args[1], args[0], parsed), enumerate(reads)))
        seconds = time.perf_counter() - started
        used = {name: round(cpu_seconds(pid) - before[name], 3) for name, pid in pids.items()}
        runs.append({"seconds": round(seconds, 3), "cpu_seconds": round(sum(used.values()), 3), "cpu": used,
                     "entry_bytes": fetched})
    for read in reads:
        read.close()
    cheapest = min(runs, key=lambda run: run["cpu_seconds"])
    mib = cheapest["entry_bytes"] / MiB
    return {"seconds": min(run["seconds"] for run in runs), "cpu_seconds": cheapest["cpu_seconds"],
            "entry_bytes": cheapest["entry_bytes"],
            "cpu_ms_per_mib": {name: round(value / mib * 1e3, 2) for name, value in cheapest["cpu"].items()},
            "runs": [run["seconds"] for run in runs], "cpu_seconds_runs": [run["cpu_seconds"] for run in runs],
            "method": f"{SERVERS} servers holding the entries in memory, each entry on one, range reads of at most "
                      f"{READ_BATCH_BYTES // MiB} MiB in our wire format on their framed ports' read connections "
                      "(docs/protocol.md W12), one fetching thread and connection per server"}


def bare_fetch(uri: str, spans: list[str], repeats: int) -> dict:
    """Start the 3 servers, run the fetching process, stop the servers; its result (module docstring)."""
    servers: list[tuple[subprocess.Popen, int]] = []
    try:
        for index in range(SERVERS):
            port = free_port()
            servers.append((subprocess.Popen([sys.executable, __file__, "serve", str(port), uri, str(index), *spans],
                                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env(),
                                             text=True), port))
        read_ports = []
        for process, _ in servers:
            ready = process.stdout.readline().split()
            if ready[:1] != ["ready"] or not ready[1:2] or not ready[1].startswith("add_port="):
                raise RuntimeError("a bare fetch server did not start")
            read_ports.append(int(ready[1].split("=", 1)[1]))
        pids = {f"server-{index}": process.pid for index, (process, _) in enumerate(servers)}
        command = [sys.executable, __file__, "fetch", json.dumps(read_ports), str(repeats),
                   json.dumps(pids), *spans]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=child_env())
        if done.returncode != 0:
            raise RuntimeError(f"the bare fetch failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout)
    finally:
        for process, _ in servers:
            process.kill()
            process.wait(30)


def main(argv: list[str]) -> int:
    if argv[0] == "serve":
        serve(int(argv[1]), argv[2], int(argv[3]), argv[4:])
    elif argv[0] == "fetch":
        print(json.dumps(fetch(json.loads(argv[1]), argv[4:], int(argv[2]), json.loads(argv[3]))))
    else:
        raise SystemExit(f"usage: {__file__} serve PORT URI INDEX SPANS... | fetch PORTS REPEATS PIDS SPANS...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
