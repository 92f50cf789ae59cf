"""bookie_server/add_checks.py: each add of a received batch becomes a plain tuple for storage or a refusal that
says why, in the batch's order (docs/protocol.md K1 for the key)."""
from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie_server.add_checks import sort_adds
from bookie_server.limits import MAX_MASTER_KEY_BYTES, MIN_BODY_BYTES, add_is_plain, check_add
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

KEY, STORED = b"k" * 20, b"s" * 20
BODY = b"b" * MIN_BODY_BYTES


class Add(NamedTuple):
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool = False


def no_admin(_ledger_id: int) -> None:
    return None


def test_plain_adds_keep_their_order_and_their_bodies_are_counted():
    adds = [Add(7, 0, KEY, BODY), Add(8, 5, KEY, BODY + b"x", True), Add(7, 1, KEY, BODY)]
    ops, refused, size = sort_adds(adds, 1 << 20, no_admin)
    assert ops == [tuple(add) for add in adds] and refused == []
    assert size == 3 * len(BODY) + 1


def test_malformed_adds_are_refused_bad_request_with_check_add_s_message():
    adds = [Add(7, -1, KEY, BODY), Add(7, 0, KEY, b"short"), Add(7, 1, KEY, BODY * 10),
            Add(7, 2, b"k" * (MAX_MASTER_KEY_BYTES + 1), BODY), Add(7, 3, KEY, BODY)]
    ops, refused, size = sort_adds(adds, len(BODY) * 5, no_admin)
    assert ops == [(7, 3, KEY, BODY, False)] and size == len(BODY)
    assert [(ledger, entry, status) for ledger, entry, status, _ in refused] == [(7, e, pb.BAD_REQUEST)
                                                                                 for e in (-1, 0, 1, 2)]
    for add, (_, _, _, message) in zip(adds, refused):
        assert message == check_add(add.ledger_id, add.entry_id, add.master_key, add.body, len(BODY) * 5)


def test_a_keyless_add_is_unauthorized_unless_it_is_an_administrator_s_recovery_write_back():
    asked: list[int] = []

    def admin_key(ledger_id: int) -> bytes | None:
        asked.append(ledger_id)
        return STORED if ledger_id == 7 else None
    adds = [Add(7, 0, b"", BODY), Add(7, 1, b"", BODY, True), Add(9, 0, b"", BODY, True)]
    ops, refused, size = sort_adds(adds, 1 << 20, admin_key)
    assert ops == [(7, 1, STORED, BODY, True)] and size == len(BODY)
    assert [(ledger, entry, status) for ledger, entry, status, _ in refused] == [(7, 0, pb.UNAUTHORIZED),
                                                                                 (9, 0, pb.UNAUTHORIZED)]
    assert "needs its master key" in refused[0][3]
    assert asked == [7, 9]  # only recovery adds ask for the stored key


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2**63 + 1), st.integers(-2, 2**63 + 1),
                          st.sampled_from([b"", KEY, b"k" * (MAX_MASTER_KEY_BYTES + 1)]),
                          st.integers(0, 3 * MIN_BODY_BYTES), st.booleans()), max_size=12))
def test_every_add_is_taken_or_refused_once_as_the_uninlined_checks_decide(raw):
    """Agrees with ``limits.add_is_plain``/``check_add`` (the checks the loop inlines) for any add."""
    adds = [Add(ledger, entry, key, b"b" * length, recovery) for ledger, entry, key, length, recovery in raw]
    max_size = 2 * MIN_BODY_BYTES
    ops, refused, size = sort_adds(adds, max_size, lambda ledger_id: STORED)
    taken = iter(ops)
    said_no = iter(refused)
    for add in adds:
        plain = add_is_plain(add.ledger_id, add.entry_id, add.master_key, add.body, max_size)
        problem = check_add(add.ledger_id, add.entry_id, add.master_key, add.body, max_size)
        if plain or (problem is None and add.recovery):
            assert next(taken)[:2] == (add.ledger_id, add.entry_id)
        else:
            ledger, entry, status, _ = next(said_no)
            assert (ledger, entry) == (add.ledger_id, add.entry_id)
            assert status == (pb.BAD_REQUEST if problem is not None else pb.UNAUTHORIZED)
    assert next(taken, None) is None and next(said_no, None) is None
    assert size == sum(len(op[3]) for op in ops)
