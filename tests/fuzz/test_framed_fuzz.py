"""Fuzzing a real bookie's framed port (docs/protocol.md W11, W12): hostile adds in well-formed frames, hostile
range reads on read connections (READ frames of any id, any request, over the size limit too), damaged frames and
raw garbage, one connection each, on the fuzz suite's target (tests/fuzz/conftest.py).

After every input the connection must end by itself within ``END_WAIT_S`` once the input is sent and the
fuzzer's side is shut for writing (the bookie answers with END frames or closes; it never waits for bytes that
cannot come), every answer must be a valid status and never IO_ERROR (the disk is healthy), and the probe must
pass (alive, SERVING, Info OK, memory bound); at the end the seed data, new writes and a restart are checked.
"""
from __future__ import annotations

import socket
import time

import pytest
from hypothesis import strategies as st

from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing import wire_fuzz as wf
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.fuzz.conftest import FuzzTarget, examples, report
from tests.fuzz.runner import run_inputs
from tests.fuzz.test_wire_fuzz import MAX_ENTRY_SIZE, _check_status

END_WAIT_S = 15.0


def add_port(target: FuzzTarget) -> int:
    with open_metadata_store(target.metadata_uri) as store:
        return store.bookies()[target.bookie.bookie_id].info["add_port"]


def frames_of(draw, target: FuzzTarget) -> tuple[str, bytes]:
    """A HELLO, ADDS frames of hostile adds (or, on a read connection, READ frames of hostile reads), and maybe an
    END: well formed, then maybe damaged."""
    reads = draw(st.integers(0, 3)) == 0
    flags = draw(st.sampled_from((frames.READS, frames.READS | frames.ANSWER_RUNS, 0xFFFF) if reads
                                 else (0, frames.ANSWER_RUNS, 0xFFFF)))
    parts = [frames.hello(draw(st.sampled_from((1, 2, 0xFFFF))), flags)]
    for _ in range(draw(st.integers(0, 3))):
        if flags & frames.READS:  # any id, any request; a huge key makes the frame pass its limit (refused)
            request = draw(wf.read_requests(target.seed_keys())).SerializeToString()
            request_id = frames.REQUEST_ID.pack(draw(st.integers(0, 2**32 - 1)))
            parts.append(frames.frame(Kind.READ, request_id + request))
            continue
        adds = draw(st.lists(wf.add_requests(MAX_ENTRY_SIZE, target.seed_keys()).map(lambda drawn: drawn[0]),
                             min_size=1, max_size=3))
        parts.append(frames.frame(Kind.ADDS, pb.AddBatch(adds=adds).SerializeToString()))
    if draw(st.booleans()):
        parts.append(frames.end(pb.OK))
    data = b"".join(parts)
    if draw(st.booleans()):
        how, data = draw(wf.mutated(data))
        return f"{how} of {len(parts)} frames", data
    return f"{len(parts)} well-formed frames", data


def inputs(target: FuzzTarget):
    @st.composite
    def one(draw):
        if draw(st.integers(0, 4)) == 0:
            data = draw(wf.garbage())
            return f"garbage ({len(data)} bytes)", data
        return frames_of(draw, target)
    return one()


def send_framed(target: FuzzTarget, port: int, drawn: tuple[str, bytes]) -> None:
    what, data = drawn
    target.note_input(f"framed port: {what}: {len(data)} bytes {data[:48]!r}")
    reader = frames.FrameReader(64 * 1024 * 1024)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=END_WAIT_S) as conn:
            try:
                conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)  # all of the input: the bookie must not wait for more
            except OSError:  # the bookie refused the input and closed before it was all sent: read its END
                target.count("closed while sending")
            deadline = time.monotonic() + END_WAIT_S
            while True:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                for kind, payload in reader.feed(chunk):
                    if kind is Kind.ANSWERS:
                        answer = pb.AddResultBatch.FromString(payload)
                        for result in answer.results:
                            _check_status(target, result.status, what)
                        for _ in answer.acked:
                            target.count("OK run")
                    elif kind is Kind.READ_ANSWER:
                        _, message = frames.split_request_id(payload)
                        _check_status(target, pb.ReadResponse.FromString(message).status, what)
                    elif kind is Kind.END:
                        status, message = frames.parse_end(payload)
                        target.count(f"END {pb.Status.Name(status) if status in pb.Status.values() else status}")
                        if status == pb.IO_ERROR:
                            target.fail("io error", f"the framed port ended a stream with IO_ERROR: {message}")
    except socket.timeout:
        target.fail("hang", f"the framed port did not end the connection within {END_WAIT_S:.0f} s of the input's "
                            f"end: {what}")
    except ConnectionError:
        target.count("connection reset")
    except ValueError as exc:
        target.fail("bad answer", f"the framed port sent bytes that are not frames ({exc}) after {what}")


@pytest.mark.parametrize("target", ["framed"], indirect=True)
def test_framed_port_under_hostile_frames_and_garbage(target):
    port = add_port(target)
    assert port > 0
    run_inputs(target, inputs(target), lambda drawn: send_framed(target, port, drawn), examples(150))
    assert not target.finish(), report(target.failures)
