"""pyspark_ledger/wire/frames.py: the framed add stream's codec, its bounds and the order of its frames."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_ledger.wire import frames as fr
from pyspark_ledger.wire.frames import Kind

MAX = 64 * 1024  # the data frames' limit of the readers below

data_frames = st.tuples(st.sampled_from([Kind.ADDS, Kind.ANSWERS]), st.binary(max_size=3000))
control_frames = st.one_of(
    st.builds(lambda v, f: (Kind.HELLO, fr.hello(v, f)[5:]), st.integers(1, 2**16 - 1), st.integers(0, 2**16 - 1)),
    st.builds(lambda s, m: (Kind.END, fr.end(s, m)[5:]), st.integers(0, 2**16 - 1), st.text(max_size=1500)))


@given(st.lists(st.one_of(data_frames, control_frames), max_size=12), st.data())
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_split(sent, data):
    wire = b"".join(fr.frame(kind, payload) for kind, payload in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=20)))
    reader = fr.FrameReader(MAX)
    got = []
    for start, stop in zip([0, *cuts], [*cuts, len(wire)]):
        got += reader.feed(wire[start:stop])
    assert got == [(kind, bytes(payload)) for kind, payload in sent]
    assert reader.pending == 0


@given(st.binary(max_size=4000), st.integers(1, 64))
def test_any_bytes_give_frames_or_a_value_error_and_never_more_than_one_frame_is_held(garbage, step):
    reader = fr.FrameReader(fr.MAX_CONTROL_BYTES)
    try:
        for start in range(0, len(garbage), step):
            for kind, payload in reader.feed(garbage[start:start + step]):
                assert kind in Kind
                assert len(payload) <= fr.MAX_CONTROL_BYTES
            assert reader.pending <= 4 + fr.MAX_CONTROL_BYTES  # one incomplete frame at most
    except ValueError:
        with pytest.raises(ValueError):  # a broken stream stays broken
            reader.feed(b"")


def test_an_oversized_frame_is_refused_from_its_header_alone_naming_the_limit():
    reader = fr.FrameReader(MAX)
    with pytest.raises(ValueError, match=f"ADDS frame of {MAX + 1} bytes: over the limit of {MAX}"):
        reader.feed(fr.header(Kind.ADDS, MAX + 1))
    assert reader.pending == 0  # nothing of it was kept
    with pytest.raises(ValueError, match="over the limit"):
        reader.feed(fr.frame(Kind.ADDS, b"fine"))  # and the stream stays broken


def test_a_frame_of_exactly_the_limit_passes():
    reader = fr.FrameReader(MAX)
    assert reader.feed(fr.frame(Kind.ANSWERS, b"a" * MAX)) == [(Kind.ANSWERS, b"a" * MAX)]


def test_control_frames_have_their_own_small_limit():
    reader = fr.FrameReader(MAX)
    with pytest.raises(ValueError, match=f"HELLO frame of {fr.MAX_CONTROL_BYTES + 1} bytes: over the limit of "
                                         f"{fr.MAX_CONTROL_BYTES}"):
        reader.feed(fr.header(Kind.HELLO, fr.MAX_CONTROL_BYTES + 1))


@pytest.mark.parametrize("raw, problem", [
    (b"\0\0\0\0\x01", "0 is not a frame"),
    (b"\0\0\0\x01\x00", "unknown frame kind 0"),
    (b"\0\0\0\x01\x08", "unknown frame kind 8"),
    (b"\0\0\0\x01\xff", "unknown frame kind 255"),
])
def test_a_zero_length_or_an_unknown_kind_breaks_the_stream(raw, problem):
    with pytest.raises(ValueError, match=problem):
        fr.FrameReader(MAX).feed(raw)


def test_a_reader_takes_no_limit_below_the_control_frames():
    with pytest.raises(ValueError, match=str(fr.MAX_CONTROL_BYTES)):
        fr.FrameReader(fr.MAX_CONTROL_BYTES - 1)


def test_a_header_past_four_gigabytes_is_refused():
    with pytest.raises(ValueError, match="0 to 4294967294 bytes"):
        fr.header(Kind.ADDS, 2**32 - 1)
    with pytest.raises(ValueError):
        fr.header(Kind.ADDS, -1)


@given(st.integers(1, 2**16 - 1), st.integers(0, 2**16 - 1))
def test_hello_round_trips(version, flags):
    assert fr.parse_hello(fr.hello(version, flags)[5:]) == (version, flags)


@pytest.mark.parametrize("payload, problem", [
    (b"", "holds 12 bytes, not 0"),
    (fr.hello()[5:] + b"x", "holds 12 bytes, not 13"),
    (b"GRPCPRI!" + b"\0\x01\0\x01", "magic"),
    (fr.MAGIC + b"\0\0\0\0", "version 1 or later, not 0"),
])
def test_a_malformed_hello_is_refused(payload, problem):
    with pytest.raises(ValueError, match=problem):
        fr.parse_hello(payload)


@given(st.integers(1, 2**16 - 1), st.integers(0, 2**16 - 1), st.text(max_size=60))
def test_the_bookie_agrees_on_the_lower_version_and_the_known_flags_asked(version, flags, bookie_id):
    payload = fr.agree(version, flags, bookie_id)[5:]
    assert fr.parse_welcome(payload, flags) == (min(version, fr.VERSION), flags & fr.KNOWN_FLAGS, bookie_id)


@pytest.mark.parametrize("payload, asked, problem", [
    (b"\0\x01", 1, "at least 5 bytes"),
    (b"\0\0\0\0\0", 1, "answered version 0"),
    ((fr.VERSION + 1).to_bytes(2, "big") + b"\0\0\0", 1, f"speaks 1 to {fr.VERSION}"),
    (b"\0\x01\0\x02\0", 1, "beyond those asked"),
    (b"\0\x01\0\0\x03ab", 0, "is 3 bytes, but 2 follow"),
    (b"\0\x01\0\0\x02\xff\xfe", 0, "not UTF-8"),
])
def test_a_malformed_welcome_is_refused(payload, asked, problem):
    with pytest.raises(ValueError, match=problem):
        fr.parse_welcome(payload, asked)


def test_a_bookie_id_too_long_for_welcome_is_refused():
    with pytest.raises(ValueError, match="at most 255 bytes"):
        fr.welcome(1, 0, "b" * 256)


@given(st.integers(0, 2**16 - 1), st.text(max_size=2000))
def test_end_round_trips_and_cuts_a_long_message_at_a_character(status, message):
    got_status, got_message = fr.parse_end(fr.end(status, message)[5:])
    assert got_status == status
    assert message.startswith(got_message)
    assert len(got_message.encode()) <= fr.MAX_END_MESSAGE_BYTES
    if len(message.encode()) <= fr.MAX_END_MESSAGE_BYTES:
        assert got_message == message


def test_a_malformed_end_is_refused():
    with pytest.raises(ValueError, match="holds 2 to 1026 bytes, not 1"):
        fr.parse_end(b"\0")
    with pytest.raises(ValueError, match="not 1027"):
        fr.parse_end(b"\0\0" + b"x" * 1025)
    assert fr.parse_end(b"\0\x05\xff") == (5, "\ufffd")  # hostile bytes read, never raised on


def test_the_bookie_takes_hello_then_adds_until_end_and_nothing_after():
    rules = fr.ServerRules()
    assert rules.check(Kind.HELLO) is None
    assert rules.check(Kind.ADDS) is None
    assert rules.check(Kind.ADDS) is None
    assert "HELLO frame not allowed here (expected ADDS or END)" in rules.check(Kind.HELLO)
    assert rules.check(Kind.END) is None
    assert rules.check(Kind.ADDS) == "ADDS frame after the END: the stream is over"


@pytest.mark.parametrize("first", [Kind.ADDS, Kind.ANSWERS, Kind.WELCOME])
def test_the_bookie_wants_hello_first(first):
    assert fr.ServerRules().check(first) == f"the first frame must be HELLO, not {first.name}"


def test_either_side_may_end_before_anything_else():
    for rules in (fr.ServerRules(), fr.ClientRules()):
        assert rules.check(Kind.END) is None
        assert "after the END" in rules.check(Kind.END)


def test_the_client_takes_welcome_then_answers_until_end():
    rules = fr.ClientRules()
    assert rules.check(Kind.ANSWERS) == "the first frame must be WELCOME, not ANSWERS"
    rules = fr.ClientRules()
    assert rules.check(Kind.WELCOME) is None
    assert rules.check(Kind.ANSWERS) is None
    assert "ADDS frame not allowed here (expected ANSWERS or END)" in rules.check(Kind.ADDS)
    assert "WELCOME frame not allowed here" in rules.check(Kind.WELCOME)
    assert rules.check(Kind.END) is None


@given(st.binary(min_size=0, max_size=200), st.integers(0, 300), st.sampled_from([Kind.ADDS, Kind.ANSWERS]))
def test_a_large_frame_is_handed_over_with_what_arrived_of_it_once_half_arrived(payload_start, rest, kind):
    whole = payload_start + b"r" * rest
    reader = fr.FrameReader(MAX)
    assert reader.feed(fr.header(kind, len(whole)) + payload_start) == ([] if rest else [(kind, whole)])
    taken = reader.large_frame(at_least=1)
    if rest == 0 or not whole or len(payload_start) * 2 < len(whole):
        assert taken is None
        assert reader.pending == (5 + len(payload_start) if rest else 0)  # the reader still holds what came
        return
    got_kind, size, held, reserved = taken
    assert (got_kind, size, len(held), reserved) == (kind, len(whole), len(payload_start), False)
    assert bytes(held) == payload_start
    assert reader.pending == 0
    assert reader.feed(fr.frame(Kind.END, fr.end(1)[5:])) == [(Kind.END, fr.end(1)[5:])]  # the next frame reads


def test_a_frame_below_the_size_asked_is_left_to_feed():
    reader = fr.FrameReader(MAX)
    reader.feed(fr.header(Kind.ADDS, 100) + b"abc")
    assert reader.large_frame(at_least=101) is None
    assert reader.pending == 8


def test_an_announced_frame_is_handed_over_only_once_half_of_it_arrived():
    reader = fr.FrameReader(MAX)
    reader.feed(fr.header(Kind.ADDS, MAX))  # announced, not sent
    assert reader.large_frame(at_least=1024) is None
    reader.feed(b"a" * (MAX // 2 - 1))
    assert reader.large_frame(at_least=1024) is None
    reader.feed(b"a")
    kind, size, held, reserved = reader.large_frame(at_least=1024)
    assert (kind, size, len(held), reserved) == (Kind.ADDS, MAX, MAX // 2, False)


def test_a_large_frame_is_handed_over_before_half_arrived_only_when_its_size_is_granted():
    asked = []

    def refuse(size: int) -> bool:
        asked.append(size)
        return False

    reader = fr.FrameReader(MAX)
    reader.feed(fr.header(Kind.ADDS, 4096) + b"abc")
    assert reader.large_frame(at_least=1024, reserve=refuse) is None
    assert asked == [4096] and reader.pending == 8  # refused: the reader keeps what came, as without a budget
    kind, size, held, reserved = reader.large_frame(at_least=1024, reserve=lambda size: asked.append(size) or True)
    assert (kind, size, len(held), reserved, asked) == (Kind.ADDS, 4096, 3, True, [4096, 4096])
    assert bytes(held) == b"abc" and reader.pending == 0


def test_a_budget_is_not_asked_for_a_frame_half_arrived_or_below_the_size_asked():
    def never(size: int) -> bool:
        raise AssertionError("asked")

    reader = fr.FrameReader(MAX)
    reader.feed(fr.header(Kind.ADDS, 100) + b"abc")
    assert reader.large_frame(at_least=101, reserve=never) is None
    reader = fr.FrameReader(MAX)
    reader.feed(fr.header(Kind.ADDS, 2048) + b"a" * 1024)
    assert reader.large_frame(at_least=1024, reserve=never)[3] is False


def test_the_handshake_deadline_is_one_timeout_from_the_connection_s_start_for_tls_and_hello_together():
    assert fr.HANDSHAKE_TIMEOUT_S == 10.0  # docs/protocol.md W11
    assert fr.handshake_deadline(100.0) == 110.0
    assert fr.handshake_deadline(0.0) == fr.HANDSHAKE_TIMEOUT_S


@pytest.mark.parametrize("answered_as, meant, fine", [
    ("127.0.0.1:3181", "127.0.0.1:3181", True),
    ("127.0.0.1:3182", "127.0.0.1:3181", False),  # another bookie took the port: a stale registration
    ("", "127.0.0.1:3181", False),
    ("bookie-a", "BOOKIE-A", False),  # ids are compared exactly
])
def test_a_welcome_from_another_bookie_is_refused_with_what_to_check(answered_as, meant, fine):
    problem = fr.welcome_problem(answered_as, meant)
    if fine:
        assert problem is None
    else:
        assert repr(answered_as) in problem and "registration stale" in problem


# --- read connections (docs/protocol.md W12) --------------------------------------------------------------------
@given(st.integers(0, 2**32 - 1), st.binary(max_size=fr.MAX_READ_REQUEST_BYTES - fr.REQUEST_ID.size))
def test_a_read_and_its_answer_carry_their_request_id_through_a_reader(request_id, message):
    reader = fr.FrameReader(MAX)
    wire = fr.read_frame(request_id, message) + fr.read_answer_head(request_id, len(message)) + message
    (read_kind, read), (answer_kind, answer) = reader.feed(wire)
    assert (read_kind, answer_kind) == (Kind.READ, Kind.READ_ANSWER)
    assert [(got_id, bytes(view)) for got_id, view in map(fr.split_request_id, (read, answer))] == \
        [(request_id, message)] * 2


def test_a_read_past_its_limits_is_refused_before_it_is_sent():
    with pytest.raises(ValueError, match="at most 1024 bytes, not 1025"):
        fr.read_frame(1, b"x" * (fr.MAX_READ_REQUEST_BYTES - fr.REQUEST_ID.size + 1))
    with pytest.raises(ValueError, match="request id is 0 to 4294967295"):
        fr.read_frame(2**32, b"")
    with pytest.raises(ValueError, match="4-byte request id; this one holds 3 bytes"):
        fr.split_request_id(b"abc")


def test_a_read_frame_has_its_own_small_limit_whatever_the_data_frames_limit():
    reader = fr.FrameReader(1 << 30)
    with pytest.raises(ValueError, match="READ frame of 1025 bytes: over the limit of 1024"):
        reader.feed(fr.header(Kind.READ, fr.MAX_READ_REQUEST_BYTES + 1))
    assert fr.FrameReader(MAX).feed(fr.frame(Kind.READ, b"r" * fr.MAX_READ_REQUEST_BYTES)) == \
        [(Kind.READ, b"r" * fr.MAX_READ_REQUEST_BYTES)]
    big = fr.read_answer_head(1, MAX - fr.REQUEST_ID.size)  # READ_ANSWER is a data frame: MAX passes
    reader = fr.FrameReader(MAX)
    assert reader.feed(big) == []
    kind, size, arrived, granted = reader.large_frame(1, lambda size: True)
    assert (kind, size, bytes(arrived), granted) == (Kind.READ_ANSWER, MAX, fr.REQUEST_ID.pack(1), True)


def test_a_narrowed_reader_keeps_what_was_held_and_checks_it_against_the_new_limit():
    wide = fr.FrameReader(1 << 20)
    assert wide.feed(fr.header(Kind.ADDS, 5000) + b"a" * 10) == []  # a frame begun under the wide limit
    narrow = wide.narrowed(fr.MAX_CONTROL_BYTES)
    assert wide.pending == 0 and narrow.pending == 15
    with pytest.raises(ValueError, match="ADDS frame of 5000 bytes: over the limit of 1026"):
        narrow.feed(b"more")
    held = fr.FrameReader(1 << 20)
    assert held.feed(fr.frame(Kind.READ, b"1234")[:7]) == []
    assert held.narrowed(fr.MAX_CONTROL_BYTES).feed(fr.frame(Kind.READ, b"1234")[7:]) == [(Kind.READ, b"1234")]


def test_a_read_connection_takes_reads_then_an_end_and_its_client_takes_answers_then_an_end():
    bookie = fr.ReadServerRules()
    assert [bookie.check(kind) for kind in (Kind.HELLO, Kind.READ, Kind.READ, Kind.END)] == [None] * 4
    assert "after the END" in bookie.check(Kind.READ)
    past_hello = fr.ReadServerRules(past_first=True)
    assert "ADDS frame not allowed here (expected READ or END)" == past_hello.check(Kind.ADDS)
    assert "HELLO frame not allowed here" in fr.ReadServerRules(past_first=True).check(Kind.HELLO)
    client = fr.ReadClientRules()
    assert client.check(Kind.READ_ANSWER) == "the first frame must be WELCOME, not READ_ANSWER"
    client = fr.ReadClientRules()
    assert [client.check(kind) for kind in (Kind.WELCOME, Kind.READ_ANSWER, Kind.END)] == [None] * 3
    assert "ANSWERS frame not allowed here" in fr.ReadClientRules(past_first=True).check(Kind.ANSWERS)


def test_an_add_stream_s_hello_asks_no_reads_unless_told():
    assert fr.parse_hello(fr.hello()[5:])[1] == fr.ADD_FLAGS == fr.ANSWER_RUNS
    assert fr.parse_welcome(fr.agree(1, fr.READS | 0x8000, "b")[5:], fr.READS | 0x8000)[1] == fr.READS
