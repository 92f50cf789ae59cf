"""bench/transport_floor.py: the framed servers' parsing, and real runs of all three kinds."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import transport_floor as tf  # noqa: E402
from bench.noop_bookies import stop_servers  # noqa: E402


def frame(entry_id: int, extra: bytes = b"x" * 100) -> bytes:
    return tf.LENGTH.pack(tf.ENTRY_ID.size + len(extra)) + tf.ENTRY_ID.pack(entry_id) + extra


def test_every_whole_frame_is_answered_with_its_id_and_a_partial_one_waits():
    data = frame(7) + frame(8) + frame(9)[:50]
    buffer = bytearray(data)
    sent = []
    taken = tf.answer_frames(buffer, len(buffer), sent.append)
    assert [tf.ENTRY_ID.unpack(one)[0] for one in sent] == [7, 8]
    assert taken == 2 * len(frame(0))
    rest = bytearray(data[taken:] + frame(9)[50:])  # the rest of frame 9 arrives
    assert tf.answer_frames(rest, len(rest), sent.append) == len(frame(9))
    assert tf.ENTRY_ID.unpack(sent[-1])[0] == 9


def test_a_length_header_split_across_reads_waits_for_its_last_byte():
    sent = []
    whole = frame(3)
    assert tf.answer_frames(bytearray(whole[:3]), 3, sent.append) == 0
    assert sent == []


@pytest.mark.parametrize("size", [0, tf.ENTRY_ID.size - 1, tf.MAX_FRAME_BYTES + 1, 2**32 - 1])
def test_a_frame_outside_the_bounds_is_refused_naming_them(size):
    buffer = bytearray(tf.LENGTH.pack(size) + b"\0" * 16)
    with pytest.raises(ValueError, match=f"frames hold {tf.ENTRY_ID.size} to {tf.MAX_FRAME_BYTES} bytes"):
        tf.answer_frames(buffer, len(buffer), lambda _: None)


def read_answer(conn: socket.socket) -> bytes:
    data = b""
    while len(data) < tf.ENTRY_ID.size:
        chunk = conn.recv(tf.ENTRY_ID.size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_a_real_server_drops_a_connection_that_sends_an_oversized_frame_and_serves_the_next():
    servers = tf.start_framed_servers(1)
    try:
        port = servers[0][1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as bad:
            bad.sendall(tf.LENGTH.pack(tf.MAX_FRAME_BYTES + 1) + b"\0" * 64)
            assert bad.recv(16) == b""  # closed, nothing answered
        with socket.create_connection(("127.0.0.1", port), timeout=10) as good:
            whole = frame(41)
            good.sendall(whole[:5])  # in two pieces
            good.sendall(whole[5:])
            assert tf.ENTRY_ID.unpack(read_answer(good))[0] == 41
    finally:
        stop_servers(servers)
    assert all(process.poll() is not None for process, _ in servers)


def test_every_kind_runs_for_real_and_reports_latency_and_cpu_per_add():
    # 500 adds per kind: enough CPU for the servers' clock ticks (10 ms) to count some (100 adds, seen in a full
    # run, left a server at 0)
    result = tf.run(seconds=1.0, rate=500.0, rounds=1)
    assert set(result["runs"]) == set(tf.KINDS)
    for kind in tf.KINDS:
        (one,) = result["runs"][kind]
        assert 0 < one["p50_ms"] <= one["p99_ms"], kind
        assert one["client_cpu_us_per_add"] > 0 and one["server_cpu_us_per_add"] > 0, kind
        assert result["summary"][kind]["p50_ms"]["median"] == one["p50_ms"]


def test_the_framed_client_counts_every_add_answered_by_all_three_servers(tmp_path):
    from pyspark_ledger.security.certs import write_tls_files
    tls = write_tls_files(tmp_path / "tls")
    for tls_dir, ca in ((None, None), (str(tls.directory), str(tls.ca))):
        servers = tf.start_framed_servers(3, tls_dir)
        try:
            pids = {f"s{index}": process.pid for index, (process, _) in enumerate(servers)}
            result = tf.framed_fanout([port for _, port in servers], 0.5, 400.0, pids, ca)
        finally:
            stop_servers(servers)
        assert 150 <= result["adds"] <= 210  # 400/s for 0.5 s, all answered (else it would time out)
        assert set(result["cpu_us_per_entry"]) == {"client", "s0", "s1", "s2"}
