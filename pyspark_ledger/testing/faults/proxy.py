"""A fault-injecting TCP proxy in user space: one listener in front of one server.

``FaultProxy(target)`` listens on 127.0.0.1 (or a given address) and relays every connection to
``target`` (``host:port``). Each direction -- ``UP`` (client to server) and ``DOWN`` (server to client)
-- has its own rules, changed at any time from any thread:

- ``delay(direction, fixed_s, jitter_s)``: each chunk is delivered ``fixed + uniform(0, jitter)`` after it
  arrived, in order (a later chunk never overtakes an earlier one).
- ``loss(direction, probability, hold_s, reset_probability)``: TCP never loses bytes, it retransmits;
  a lost segment shows up as a stall. So a chunk is held ``hold_s`` with ``probability``, and the
  connection is reset with ``reset_probability`` (a peer that gave up).
- ``block(direction)``: that direction's bytes stop (held, not dropped) until ``heal()``; with both
  directions blocked, new connections are refused (reset at once): a partition. One direction
  blocked is a one-way partition: connections are made, bytes flow only the other way.
- ``reset_all()``: cut every current connection with a TCP reset.
- ``heal()``: clear every rule and release what was held.

Bounds: at most ``max_connections`` relayed at once (more are reset), reads of at most
``chunk_bytes``, and at most ``queue_chunks`` chunks waiting per direction of a connection (the reader
stops reading beyond it, so a blocked peer sees TCP back-pressure, never unbounded memory). The proxy
runs its own event loop on a daemon thread; ``close()`` stops it and every relay.
"""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError

UP = "up"
DOWN = "down"
DIRECTIONS = (UP, DOWN)
MAX_DELAY_S = 60.0
_START_TIMEOUT_S = 10.0


@dataclass
class Rules:
    """The faults of one direction (see the module docstring)."""

    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_probability: float = 0.0
    loss_hold_s: float = 0.0
    reset_probability: float = 0.0
    blocked: bool = False

    def clear(self) -> None:
        self.__init__()


def _check_direction(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction not in DIRECTIONS:
        raise InvalidArgumentError(f"direction must be 'up', 'down' or 'both', got {direction!r}")
    return (direction,)


def _check_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DELAY_S:
        raise InvalidArgumentError(f"{name} must be a number of seconds in 0..{MAX_DELAY_S:g}, got {value!r}")
    return float(value)


def _check_probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidArgumentError(f"{name} must be a probability in 0..1, got {value!r}")
    return float(value)


class _Relay:
    """One relayed connection: two pumps (reader task -> bounded queue -> writer task) per direction."""

    def __init__(self, proxy: "FaultProxy", client: tuple, server: tuple) -> None:
        self.proxy = proxy
        self.streams = {UP: (client[0], server[1]), DOWN: (server[0], client[1])}
        self.writers = (client[1], server[1])
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        for direction, (reader, writer) in self.streams.items():
            queue: asyncio.Queue = asyncio.Queue(self.proxy.queue_chunks)
            self.tasks.append(asyncio.ensure_future(self._read(direction, reader, queue)))
            self.tasks.append(asyncio.ensure_future(self._write(direction, writer, queue)))

    async def _read(self, direction: str, reader: asyncio.StreamReader, queue: asyncio.Queue) -> None:
        last_due = 0.0
        try:
            while True:
                data = await reader.read(self.proxy.chunk_bytes)
                rules = self.proxy.rules[direction]
                due = time.monotonic() + rules.delay_s + self.proxy.random.uniform(0, rules.jitter_s)
                if rules.loss_probability and self.proxy.random.random() < rules.loss_probability:
                    due += rules.loss_hold_s
                    self.proxy.count("stalls")
                last_due = max(last_due, due)
                await queue.put((last_due, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            self.abort()

    async def _write(self, direction: str, writer: asyncio.StreamWriter, queue: asyncio.Queue) -> None:
        try:
            while True:
                due, data = await queue.get()
                await self.proxy.wait_open(direction)
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self.proxy.wait_open(direction)
                rules = self.proxy.rules[direction]
                if rules.reset_probability and self.proxy.random.random() < rules.reset_probability:
                    self.proxy.count("resets")
                    self.abort()
                    return
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
                self.proxy.count_bytes(direction, len(data))
        except (ConnectionError, OSError):
            self.abort()

    def abort(self) -> None:
        """Reset both sockets (SO_LINGER 0: the peers see ECONNRESET) and stop the pumps."""
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            writer.transport.abort()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    async def finished(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()


class FaultProxy:
    """A TCP relay in front of ``target`` with per-direction faults (see the module docstring)."""

    def __init__(self, target: str, listen_host: str = "127.0.0.1", listen_port: int = 0, *,
                 max_connections: int = 256, chunk_bytes: int = 64 * 1024, queue_chunks: int = 16,
                 seed: int | None = None, connect_timeout_s: float = 5.0) -> None:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise InvalidArgumentError(f"target must be host:port, got {target!r}")
        for name, value, high in (("max_connections", max_connections, 10_000),
                                  ("chunk_bytes", chunk_bytes, 16 * 1024 * 1024), ("queue_chunks", queue_chunks, 1024)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise InvalidArgumentError(f"{name} must be a whole number in 1..{high}, got {value!r}")
        self.target = (host.strip("[]"), int(port))
        self.listen_host = listen_host
        self.max_connections = max_connections
        self.chunk_bytes = chunk_bytes
        self.queue_chunks = queue_chunks
        self.connect_timeout_s = _check_seconds("connect_timeout_s", connect_timeout_s)
        self.random = random.Random(seed)
        self.rules = {direction: Rules() for direction in DIRECTIONS}
        self.counters = {"connections": 0, "refused": 0, "stalls": 0, "resets": 0, "bytes_up": 0, "bytes_down": 0}
        self._relays: set[_Relay] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._opened: dict[str, asyncio.Event] = {}
        self._server: asyncio.base_events.Server | None = None
        self._closed = False
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(listen_port, ready), name=f"fault-proxy-{target}",
                                        daemon=True)
        self._thread.start()
        if not ready.wait(_START_TIMEOUT_S) or self._server is None:
            self.close()
            raise InvalidStateError(f"the fault proxy for {target} could not listen on {listen_host}:{listen_port}: "
                                    f"{getattr(self, '_start_error', 'timed out')}")

    # --- addresses ------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    # --- rules (any thread) ----------------------------------------------------
    def delay(self, direction: str, fixed_s: float, jitter_s: float = 0.0) -> None:
        fixed_s, jitter_s = _check_seconds("fixed_s", fixed_s), _check_seconds("jitter_s", jitter_s)
        for each in _check_direction(direction):
            self._set(each, delay_s=fixed_s, jitter_s=jitter_s)

    def loss(self, direction: str, probability: float, hold_s: float = 1.0, reset_probability: float = 0.0) -> None:
        probability = _check_probability("probability", probability)
        reset_probability = _check_probability("reset_probability", reset_probability)
        hold_s = _check_seconds("hold_s", hold_s)
        for each in _check_direction(direction):
            self._set(each, loss_probability=probability, loss_hold_s=hold_s, reset_probability=reset_probability)

    def block(self, direction: str = "both") -> None:
        for each in _check_direction(direction):
            self._set(each, blocked=True)

    def heal(self) -> None:
        for direction in DIRECTIONS:
            self._call(self._clear, direction)

    def reset_all(self) -> int:
        """Reset every relayed connection; returns how many."""
        return self._call(self._reset_all)

    def is_partitioned(self) -> bool:
        return all(self.rules[direction].blocked for direction in DIRECTIONS)

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def count_bytes(self, direction: str, n: int) -> None:
        with self._lock:
            self.counters["bytes_" + direction] += n

    # --- lifecycle -------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(_START_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_START_TIMEOUT_S)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- on the loop -----------------------------------------------------------
    def _run(self, listen_port: int, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            for direction in DIRECTIONS:
                self._opened[direction] = asyncio.Event()
                self._opened[direction].set()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, self.listen_host, listen_port, reuse_address=True))
        except OSError as exc:
            self._start_error = exc
            ready.set()
            self._loop.close()
            return
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _call(self, fn, *args):
        if self._closed or not self._loop.is_running():
            raise InvalidStateError("the fault proxy is closed")

        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(_START_TIMEOUT_S)

    def _set(self, direction: str, **changes) -> None:
        def apply() -> None:
            for name, value in changes.items():
                setattr(self.rules[direction], name, value)
            if self.rules[direction].blocked:
                self._opened[direction].clear()
        self._call(apply)

    def _clear(self, direction: str) -> None:
        self.rules[direction].clear()
        self._opened[direction].set()

    def _reset_all(self) -> int:
        relays = list(self._relays)
        for relay in relays:
            relay.abort()
        with self._lock:
            self.counters["resets"] += len(relays)
        return len(relays)

    async def wait_open(self, direction: str) -> None:
        await self._opened[direction].wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_partitioned() or len(self._relays) >= self.max_connections:
            self.count("refused")
            _reset(writer)
            return
        try:
            server = await asyncio.wait_for(asyncio.open_connection(*self.target), self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError):
            self.count("refused")
            _reset(writer)
            return
        self.count("connections")
        relay = _Relay(self, (reader, writer), server)
        self._relays.add(relay)
        relay.start()
        try:
            await relay.finished()
        finally:
            self._relays.discard(relay)

    async def _shutdown(self) -> None:
        self._server.close()
        for relay in list(self._relays):
            relay.abort()
        tasks = [task for relay in self._relays for task in relay.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
