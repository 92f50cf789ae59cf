"""The client seam (pyspark_ledger.client.bookie_rpc) against real bookie processes."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from pyspark_ledger.client import BookieClient, BookieStatus, parse_address
from pyspark_ledger.errors import BookieUnavailableError, InvalidArgumentError, InvalidStateError

from .conftest import KEY, entry


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("add-stream-receiver")]


def test_a_killed_bookie_fails_pending_adds_and_reads_as_unavailable(make_bookie, client_for):
    bookie = make_bookie().start()
    client = client_for(bookie)
    stream = client.add_stream()
    assert stream.add(700, 0, KEY, entry(700, 0)).result(30).ok
    bookie.kill()
    late = stream.add(700, 1, KEY, entry(700, 1))
    with pytest.raises(BookieUnavailableError) as failed:
        late.result(30)
    assert failed.value.bookie_id == bookie.bookie_id
    with pytest.raises(BookieUnavailableError) as unreachable:
        client.read(700, 0, timeout=5, master_key=KEY)
    assert unreachable.value.bookie_id == bookie.bookie_id and "read of ledger 700" in str(unreachable.value)
    assert stream.closed
    bookie.start()  # the same client reconnects to the restarted bookie
    assert client.read(700, 0, master_key=KEY).entries == ((0, entry(700, 0)),)
    with client.add_stream() as again:
        assert again.add(700, 1, KEY, entry(700, 1)).result(30).ok


def test_a_frozen_bookie_times_out_then_answers_when_resumed(make_bookie, client_for):
    bookie = make_bookie().start()
    client = client_for(bookie)
    stream = client.add_stream()
    assert stream.add(701, 0, KEY, entry(701, 0)).result(30).ok
    bookie.pause()
    try:
        pending = stream.add(701, 1, KEY, entry(701, 1))
        with pytest.raises(InvalidStateError, match="already in flight"):
            stream.add(701, 1, KEY, entry(701, 1))
        with pytest.raises(BookieUnavailableError) as timed_out:
            client.read(701, 0, timeout=0.5, master_key=KEY)
        assert timed_out.value.status is BookieStatus.TIMEOUT
    finally:
        os.kill(bookie.pid, signal.SIGCONT)
    assert pending.result(30).ok
    stream.close()


def test_a_bookie_slow_to_answer_a_new_connection_is_waited_for_not_failed(make_bookie, client_for):
    """A busy host may take longer than 100 ms to finish the HTTP/2 handshake of a new connection; the
    first call of a new client waits for it instead of failing (gRPC's connect timeout, CHANNEL_OPTIONS)."""
    bookie = make_bookie().start()
    with client_for(bookie).add_stream() as stream:
        assert stream.add(702, 0, KEY, entry(702, 0)).result(30).ok
    bookie.pause()  # the kernel still accepts the connection; the handshake waits
    resume = threading.Timer(0.6, os.kill, (bookie.pid, signal.SIGCONT))
    resume.start()
    try:
        fresh = client_for(bookie)  # a new client: a new connection
        assert fresh.read(702, 0, timeout=20, master_key=KEY).entries == ((0, entry(702, 0)),)
    finally:
        resume.cancel()
        os.kill(bookie.pid, signal.SIGCONT)


def test_close_joins_every_thread_and_later_adds_fail(make_bookie):
    bookie = make_bookie().start()
    before = set(stream_threads())
    client = BookieClient(bookie.bookie_id)
    streams = [client.add_stream() for _ in range(3)]
    futures = [s.add(702 + n, e, KEY, entry(702 + n, e)) for n, s in enumerate(streams) for e in range(50)]
    client.close()
    assert set(stream_threads()) == before
    for future in futures:  # answered before the half-close completed, or failed as unavailable
        assert future.exception(30) is None or isinstance(future.exception(), BookieUnavailableError)
    with pytest.raises(BookieUnavailableError):
        streams[0].add(702, 999, KEY, entry(702, 999)).result(5)
    with pytest.raises(InvalidStateError):
        client.add_stream()


def test_bad_arguments_are_refused_before_anything_is_sent(make_bookie, client_for):
    bookie = make_bookie().start()
    client = client_for(bookie)
    with client.add_stream() as stream:
        with pytest.raises(InvalidArgumentError, match="out of range"):
            stream.add(-1, 0, KEY, b"x")
        with pytest.raises(InvalidArgumentError, match="bytes"):
            stream.add(1, 0, KEY, "text")
        assert stream.add(703, 0, KEY, entry(703, 0)).result(30).ok
    with pytest.raises(InvalidArgumentError):
        client.read(-5, 0, master_key=KEY)
    assert client.read(703, 0, master_key=KEY).status == BookieStatus.OK
    for address in ("no-port", "host:", ":3181", "host:99999", "host:http"):
        with pytest.raises(InvalidArgumentError, match="host:port"):
            parse_address(address)
    assert parse_address("[::1]:3181") == ("::1", 3181)
    with BookieClient("bookie-7", address=bookie.address) as named:
        assert named.bookie_id == "bookie-7" and named.info().bookie_id == bookie.bookie_id
