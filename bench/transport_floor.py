"""What gRPC costs a paced add: the paced fan-out over gRPC beside the same fan-out over plain framed TCP.

Usage: ``python bench/transport_floor.py [--seconds 6] [--rate 1000] [--rounds 3] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. At a paced 1,000 adds/s every add is its own
message to each of the 3 bookies and its own answer back, so a paced add's CPU is mostly what the transport
costs per message (docs/measurements.md, "The paced add's CPU, thread by thread"). This measures that cost
against the least a Python transport can spend, on the same machine in interleaved rounds, each kind on 3 server
processes that store nothing:

* ``grpc``: the paced 1 KiB fan-out of ``fanout_limits.grpc_fanout_limit`` (the client's own transport, one
  AddBatch in flight per stream as ours keeps on gRPC, docs/protocol.md W10) to 3 no-op gRPC servers
  (``noop_bookies.py``);
* ``framed``: the same encoded adds, each sent as one length-prefixed frame over a plain TCP connection per
  server from an asyncio client (``framed_fanout``), to 3 servers that answer each frame with its 8-byte id at
  once from one thread per connection with blocking sockets (``serve_framed``);
* ``framed_tls``: the same with TLS 1.3 (a throwaway CA from ``pyspark_ledger.security.certs``; the server
  authenticated, as a bookie under ``--tls``).

For each: p50/p99 latency from the send to the second answer (an ack quorum of 2) and the CPU per add of the
client process and of each server (``CpuMeter``); then the median and range over the rounds. The framed servers
bound what they accept (``MAX_FRAME_BYTES``: a longer frame closes the connection) and listen on 127.0.0.1
only.
"""
from __future__ import annotations

import asyncio
import os
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402
from cpu_usage import CpuMeter  # noqa: E402
from fanout_limits import KiB, grpc_fanout_limit, percentile  # noqa: E402
from noop_bookies import start_noop_servers, start_servers, stop_servers  # noqa: E402
from pyspark_ledger.client.add_wire import AddEncoder  # noqa: E402
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT  # noqa: E402
from pyspark_ledger.entry import EntryCodec, master_key  # noqa: E402

LENGTH = struct.Struct("!I")  # a frame: its length (4 bytes, big-endian), then the frame
ENTRY_ID = struct.Struct("!Q")  # a frame's first 8 bytes: the add's id, which is also the answer
MAX_FRAME_BYTES = 1 << 20
RECEIVE_BUFFER_BYTES = 1 << 21
SERVERS = 3
QUORUM = 2
KINDS = ("grpc", "framed", "framed_tls")


# --- the framed servers -----------------------------------------------------------------------------------
def answer_frames(buffer: bytearray, end: int, send) -> int:
    """Answer every whole frame in ``buffer[:end]`` with its first 8 bytes (``send``); how many bytes they took
    (the rest is the start of a frame still arriving). ValueError for a frame shorter than 8 bytes or longer
    than ``MAX_FRAME_BYTES``."""
    position = 0
    while end - position >= LENGTH.size:
        (size,) = LENGTH.unpack_from(buffer, position)
        if not ENTRY_ID.size <= size <= MAX_FRAME_BYTES:
            raise ValueError(f"a frame of {size} bytes: frames hold {ENTRY_ID.size} to {MAX_FRAME_BYTES} bytes")
        if end - position - LENGTH.size < size:
            break
        start = position + LENGTH.size
        send(bytes(buffer[start:start + ENTRY_ID.size]))
        position = start + size
    return position


def _connection(conn: socket.socket) -> None:
    """One client's frames, answered as they come, until it closes or breaks the framing."""
    buffer = bytearray(RECEIVE_BUFFER_BYTES)
    view = memoryview(buffer)
    end = 0
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            received = conn.recv_into(view[end:])
            if not received:
                return
            end += received
            taken = answer_frames(buffer, end, conn.sendall)
            if taken:
                buffer[:end - taken] = buffer[taken:end]
                end -= taken
    except (OSError, ValueError):
        return
    finally:
        conn.close()


def serve_framed(port: int, tls_dir: str | None = None) -> None:
    """Answer framed adds on 127.0.0.1:``port`` until killed (with ``tls_dir``: TLS with its bookie.pem and
    bookie-key.pem); prints "ready" once it listens."""
    context = None
    if tls_dir is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(os.path.join(tls_dir, "bookie.pem"), os.path.join(tls_dir, "bookie-key.pem"))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        if context is not None:
            try:
                conn.settimeout(10)
                conn = context.wrap_socket(conn, server_side=True)
                conn.settimeout(None)
            except (OSError, ssl.SSLError):
                conn.close()
                continue
        threading.Thread(target=_connection, args=(conn,), daemon=True).start()


def start_framed_servers(count: int, tls_dir: str | None = None):
    tls = [] if tls_dir is None else [tls_dir]
    return start_servers(count, lambda port: [sys.executable, __file__, "--serve", str(port), *tls])


# --- the framed client ------------------------------------------------------------------------------------
async def _framed_run(ports: list[int], seconds: float, rate: float, tls_ca: str | None) -> dict:
    context = None
    if tls_ca is not None:
        context = ssl.create_default_context(cafile=tls_ca)
    connections = [await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                 server_hostname="localhost" if context else None)
                   for port in ports]
    for _, writer in connections:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent_at: dict[int, float] = {}
    answers: dict[int, int] = {}
    latencies: list[float] = []
    all_answered = asyncio.Event()
    sent = [0]

    async def read(reader: asyncio.StreamReader) -> None:
        while True:
            entry_id = ENTRY_ID.unpack(await reader.readexactly(ENTRY_ID.size))[0]
            count = answers.pop(entry_id, 0) + 1
            if count == QUORUM:
                latencies.append(time.perf_counter() - sent_at[entry_id])
            if count < len(connections):
                answers[entry_id] = count
            else:
                del sent_at[entry_id]
                if not sent_at and sent[0] < 0:
                    all_answered.set()

    readers = [asyncio.ensure_future(read(reader)) for reader, _ in connections]
    codec, encoder, data = EntryCodec(), AddEncoder(1, master_key(b"bench")), os.urandom(KiB)
    started = time.perf_counter()
    count = 0
    try:
        while time.perf_counter() - started < seconds:
            delay = started + count / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            add = encoder.encode(count, codec.encode(1, count, count - 1, count * KiB, data))
            frame = LENGTH.pack(ENTRY_ID.size + len(add)) + ENTRY_ID.pack(count) + add
            sent_at[count] = time.perf_counter()
            for _, writer in connections:
                writer.write(frame)
            count += 1
        sent[0] = -1  # every add is sent: the readers may say when the last is answered
        if sent_at:
            await asyncio.wait_for(all_answered.wait(), 30)
    finally:
        for task in readers:
            task.cancel()
        for _, writer in connections:
            writer.close()
        await asyncio.gather(*readers, return_exceptions=True)
    return {"adds": count, "p50_ms_to_second_ack": round(percentile(latencies, 0.5), 3),
            "p99_ms_to_second_ack": round(percentile(latencies, 0.99), 3)}


def framed_fanout(ports: list[int], seconds: float, rate: float, servers: dict[str, int],
                  tls_ca: str | None = None) -> dict:
    """The paced framed fan-out to ``ports`` (every add answered by all of them), with CPU per add."""
    meter = CpuMeter({"client": os.getpid(), **servers}).start()
    result = asyncio.run(_framed_run(ports, seconds, rate, tls_ca))
    result.update(meter.per_item(result["adds"]))
    return result


# --- the comparison ---------------------------------------------------------------------------------------
def _figures(run: dict) -> dict:
    used = run["cpu_us_per_entry"]
    servers = [value for name, value in used.items() if name != "client"]
    return {"p50_ms": run["p50_ms_to_second_ack"], "p99_ms": run["p99_ms_to_second_ack"],
            "client_cpu_us_per_add": used["client"], "server_cpu_us_per_add": round(statistics.mean(servers), 1)}


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per kind, the median and range of each figure over its rounds."""
    out = {}
    for kind, figures in runs.items():
        out[kind] = {name: {"median": round(statistics.median(one[name] for one in figures), 3),
                            "min": min(one[name] for one in figures), "max": max(one[name] for one in figures)}
                     for name in figures[0]}
    return out


def run(seconds: float, rate: float, rounds: int) -> dict:
    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    result: dict = {"tool": "transport_floor", "seconds_per_run": seconds, "adds_per_s": rate, "rounds": rounds,
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    from pyspark_ledger.security.certs import write_tls_files
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp:
        tls = write_tls_files(Path(tmp) / "tls")
        kinds = {"grpc": start_noop_servers(SERVERS), "framed": start_framed_servers(SERVERS),
                 "framed_tls": start_framed_servers(SERVERS, str(tls.directory))}
        try:
            for round_no in range(rounds):
                order = KINDS if round_no % 2 == 0 else tuple(reversed(KINDS))
                for kind in order:
                    servers = kinds[kind]
                    pids = {f"{kind}-{index}": process.pid for index, (process, _) in enumerate(servers)}
                    ports = [port for _, port in servers]
                    if kind == "grpc":
                        one = grpc_fanout_limit(ports, Path(tmp), KiB, seconds, 1_000, pids, rate,
                                                batches_in_flight=DEFAULT_BATCHES_IN_FLIGHT)
                    else:
                        one = framed_fanout(ports, seconds, rate, pids,
                                            str(tls.ca) if kind == "framed_tls" else None)
                    runs[kind].append(_figures(one))
        finally:
            for servers in kinds.values():
                stop_servers(servers)
    result["runs"] = runs
    result["summary"] = summarize(runs)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--serve"]:  # one framed server process: --serve PORT [TLS_DIR]
        serve_framed(int(argv[1]), argv[2] if len(argv) > 2 else None)
        return 0
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 6.0, help="length of each paced run")
    parser.number("--rate", float, 1000.0, help="adds per second")
    parser.number("--rounds", int, 3, help="interleaved rounds of the 3 kinds")
    log_warnings()
    args = parser.parse_args(argv)
    return emit(run(args.seconds, args.rate, args.rounds), args.out)


if __name__ == "__main__":
    sys.exit(main())
