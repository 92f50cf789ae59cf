"""free_port: ports for test and sandbox servers, outside the range the kernel gives outgoing connections."""
from __future__ import annotations

import socket

from pyspark_ledger.testing import ports


def test_ports_are_free_below_the_ephemeral_range_and_never_given_twice():
    low = ports.ephemeral_low()
    given = [ports.free_port() for _ in range(50)]
    assert len(set(given)) == len(given)
    if low - ports.LOWEST >= 1_000:
        assert all(ports.LOWEST <= port < low for port in given)
    for port in given[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((ports.HOST, port))  # nothing listens there


def test_a_listening_port_is_never_given(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((ports.HOST, 0))
        busy.listen()
        taken = busy.getsockname()[1]
        choices = iter([taken, taken])  # the busy port twice, then whatever the real choice gives (a port
        real = ports._random.randrange  # next to it may be busy too on a machine running other tests)
        monkeypatch.setattr(ports, "ephemeral_low", lambda: 65_535)
        monkeypatch.setattr(ports._random, "randrange", lambda low, high: next(choices, None) or real(low, high))
        monkeypatch.setattr(ports, "_given", set())
        assert ports.free_port() != taken


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: ports.LOWEST + 10)
    port = ports.free_port()
    assert port > 0 and port not in range(ports.LOWEST, ports.LOWEST + 10)


def test_ephemeral_low_reads_the_kernel_setting_or_falls_back(tmp_path):
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("32768\t60999\n")
    assert ports.ephemeral_low(setting) == 32768
    assert ports.ephemeral_low(tmp_path / "missing") == 49152
    setting.write_text("garbage")
    assert ports.ephemeral_low(setting) == 49152
