"""The fault-injecting TCP proxy (pyspark_ledger/testing/faults/proxy.py) against a real echo server on 127.0.0.1:
relaying, delay, one-way and two-way partitions, resets, loss as stalls, heal, and the bounds of its arguments."""
from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.faults.proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.server.received.append(data)
            self.request.sendall(data)


@pytest.fixture
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def proxy(echo):
    with FaultProxy(f"127.0.0.1:{echo.server_address[1]}", seed=7) as proxy:
        yield proxy


def _connect(proxy: FaultProxy, timeout: float = 2.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    return sock


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _expect_refused(proxy: FaultProxy) -> None:
    """A new connection is accepted by the kernel, then reset by the proxy: the reset reaches the client at
    connect() (when it was descheduled until then), at its first send, or at its first read."""
    with pytest.raises((ConnectionResetError, ConnectionAbortedError)):
        with _connect(proxy) as sock:
            sock.sendall(b"x")
            if sock.recv(10) == b"":
                raise ConnectionResetError("closed")


def test_it_relays_bytes_both_ways(proxy):
    with _connect(proxy) as sock:
        assert _roundtrip(sock, b"hello") == b"hello"
        assert _roundtrip(sock, b"x" * 200_000) == b"x" * 200_000
    assert proxy.counters["connections"] == 1


def test_delay_slows_each_direction(proxy):
    proxy.delay("up", 0.3)
    with _connect(proxy) as sock:
        started = time.monotonic()
        assert _roundtrip(sock, b"ping") == b"ping"
        assert time.monotonic() - started >= 0.3
        proxy.heal()
        started = time.monotonic()
        assert _roundtrip(sock, b"ping") == b"ping"
        assert time.monotonic() - started < 0.3


def test_a_partition_refuses_new_connections_and_stalls_old_ones_until_heal(proxy, echo):
    with _connect(proxy) as old:
        assert _roundtrip(old, b"a") == b"a"
        proxy.block("both")
        old.sendall(b"held")
        with pytest.raises(socket.timeout):
            old.settimeout(0.5)
            old.recv(10)
        _expect_refused(proxy)
        proxy.heal()
        old.settimeout(2)
        assert old.recv(10) == b"held"  # held, never dropped
    assert proxy.counters["refused"] >= 1


def test_a_one_way_partition_stops_only_one_direction(proxy, echo):
    proxy.block("down")
    with _connect(proxy) as sock:
        sock.sendall(b"one-way")
        time.sleep(0.3)
        assert b"one-way" in b"".join(echo.received)  # the server got it
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(10)  # its answer never comes back
        proxy.heal()
        sock.settimeout(2)
        assert sock.recv(10) == b"one-way"


def test_reset_all_cuts_current_connections(proxy):
    with _connect(proxy) as sock:
        assert _roundtrip(sock, b"a") == b"a"
        assert proxy.reset_all() == 1
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(20):
                sock.sendall(b"b")
                if sock.recv(10) == b"":
                    raise ConnectionResetError("closed")
                time.sleep(0.05)


def test_loss_is_a_stall_not_missing_bytes(proxy):
    proxy.loss("up", 1.0, hold_s=0.3)
    with _connect(proxy) as sock:
        started = time.monotonic()
        assert _roundtrip(sock, b"abc") == b"abc"
        assert time.monotonic() - started >= 0.3
    assert proxy.counters["stalls"] >= 1


def test_a_connection_past_the_bound_is_refused(echo):
    with FaultProxy(f"127.0.0.1:{echo.server_address[1]}", max_connections=1) as proxy:
        with _connect(proxy) as first:
            assert _roundtrip(first, b"a") == b"a"
            _expect_refused(proxy)
        assert proxy.counters["refused"] == 1


@pytest.mark.parametrize("call", [
    lambda p: p.delay("sideways", 1), lambda p: p.delay("up", -1), lambda p: p.delay("up", 61),
    lambda p: p.loss("up", 1.5), lambda p: p.loss("up", 0.5, hold_s=True)])
def test_bad_rules_name_the_limit(proxy, call):
    with pytest.raises(InvalidArgumentError):
        call(proxy)


def test_bad_construction_is_refused():
    with pytest.raises(InvalidArgumentError, match="host:port"):
        FaultProxy("nowhere")
    with pytest.raises(InvalidArgumentError, match="max_connections"):
        FaultProxy("127.0.0.1:1", max_connections=0)
