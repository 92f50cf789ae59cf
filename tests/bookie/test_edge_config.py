"""The load-shedding and memory flags of bookie-server: defaults, the thread pool they imply, bad values."""
from __future__ import annotations

import pytest

from bookie_server.config import parse_args
from bookie_server.limits import grpc_max_message_bytes
from bookie_server.listening import grpc_server_options

REQUIRED = ["--data-dir", "/tmp/d", "--port", "4000", "--metadata", "sqlite:////tmp/m.db"]


def test_defaults_keep_threads_for_health_and_a_receive_limit_near_one_batch():
    config = parse_args(REQUIRED)
    assert config.grpc_threads == 256 + 128 + 64 + 16
    options = dict(grpc_server_options(config.max_entry_size, config.max_batch_bytes))
    assert options["grpc.max_receive_message_length"] == grpc_max_message_bytes(5 * 2**20, 8 * 2**20) == 9 * 2**20
    assert options["grpc.max_send_message_length"] >= 16 * 2**20 + config.max_entry_size  # a full range read


def test_the_flags_reach_the_config():
    config = parse_args(REQUIRED + ["--max-add-streams", "5", "--max-long-polls", "6", "--max-concurrent-reads",
                                    "7", "--grpc-workers", "2", "--max-batch-adds", "9", "--add-stream-idle-timeout",
                                    "0", "--max-inflight-bytes", str(64 * 2**20), "--max-stream-inflight-bytes",
                                    str(2**20), "--max-batch-bytes", str(2**20)])
    assert (config.max_add_streams, config.max_long_polls, config.max_concurrent_reads, config.grpc_threads) == \
        (5, 6, 7, 20)
    assert parse_args(REQUIRED).max_read_connections == 128
    assert parse_args(REQUIRED + ["--max-read-connections", "4096"]).max_read_connections == 4096
    assert (config.max_batch_adds, config.add_stream_idle_timeout_s, config.max_inflight_bytes,
            config.max_stream_inflight_bytes, config.max_batch_bytes) == (9, 0.0, 64 * 2**20, 2**20, 2**20)


@pytest.mark.parametrize("flags,words", [
    (["--max-inflight-bytes", "1000"], "no room for one entry"),
    (["--max-inflight-bytes", str(10 * 2**20), "--max-stream-inflight-bytes", str(20 * 2**20)],
     "must not be below --max-stream-inflight-bytes"),
    (["--max-add-streams", "0"], "--max-add-streams"),
    (["--max-batch-adds", "-1"], "--max-batch-adds"),
    (["--add-stream-idle-timeout", "-1"], "--add-stream-idle-timeout"),
    (["--max-read-connections", "0"], "--max-read-connections: must be a whole number from 1 to 4096"),
    (["--max-read-connections", "4097"], "--max-read-connections: must be a whole number from 1 to 4096"),
])
def test_bad_values_are_refused_naming_the_flag(flags, words, capsys):
    with pytest.raises(SystemExit) as raised:
        parse_args(REQUIRED + flags)
    assert raised.value.code == 2
    assert words in capsys.readouterr().err
