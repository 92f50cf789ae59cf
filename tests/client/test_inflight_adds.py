"""InflightAdds (spans of entry ids) against the dict of (ledger id, entry id) -> listener it replaces."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_ledger.client.inflight_adds import InflightAdds

LISTENERS = ("a", "b", "c")


class PerAdd:
    """The model: one dict item per add in flight (the stream's form before spans)."""

    def __init__(self) -> None:
        self.pending: dict = {}

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, ledger_id, entry_ids, listener):
        keys = [(ledger_id, entry_id) for entry_id in entry_ids]
        if len(set(keys)) != len(keys) or any(key in self.pending for key in keys):
            return "refused"
        self.pending.update(dict.fromkeys(keys, listener))
        return None

    def pop_run(self, ledger_id, first, last):
        return [(listener, (ledger_id, entry_id)) for entry_id in range(first, last + 1)
                if (listener := self.pending.pop((ledger_id, entry_id), None)) is not None]

    def pop_keys(self, keys):
        return [self.pending.pop(key, None) for key in keys]

    def take_all(self):
        taken, self.pending = sorted(self.pending.items()), {}
        return taken


def apply(adds, op):
    kind = op[0]
    if kind == "send":
        _, ledger_id, first, count, shuffle, listener = op
        entry_ids = list(range(first, first + count))
        if shuffle and count > 1:
            entry_ids[0], entry_ids[-1] = entry_ids[-1], entry_ids[0]
        if shuffle == 2:
            entry_ids.append(first)  # twice in one send
        result = adds.add(ledger_id, entry_ids, LISTENERS[listener])
        if isinstance(adds, InflightAdds) and result is not None:
            result = "refused"
        return result
    if kind == "run":
        _, ledger_id, first, count = op
        result = adds.pop_run(ledger_id, first, first + count - 1)
        if isinstance(adds, InflightAdds):  # flatten the pieces as the model gives them
            assert all(piece[1] for piece in result)
            return [(listener, (ledger_id, entry_id)) for listener, ids in result for entry_id in ids]
        return result
    if kind == "keys":
        return adds.pop_keys([(ledger_id, entry_id) for ledger_id, entry_id in op[1]])
    taken = adds.take_all()
    return sorted(taken)


_ledger = st.integers(1, 2)
_id = st.integers(0, 30)
_ops = st.lists(st.one_of(
    st.tuples(st.just("send"), _ledger, _id, st.integers(0, 6), st.sampled_from([0, 0, 0, 1, 2]), st.integers(0, 2)),
    st.tuples(st.just("run"), _ledger, _id, st.integers(1, 8)),
    st.tuples(st.just("keys"), st.lists(st.tuples(_ledger, _id), max_size=5)),
    st.tuples(st.just("all"))), max_size=40)


@settings(max_examples=250, deadline=None)
@given(_ops)
def test_spans_behave_as_the_dict_of_adds_in_flight(ops):
    spans, model = InflightAdds(), PerAdd()
    for op in ops:
        assert apply(spans, op) == apply(model, op), op
        assert len(spans) == len(model)
    assert sorted(spans.take_all()) == model.take_all()


def test_one_writers_sends_and_runs_stay_spans():
    adds = InflightAdds()
    for first in range(0, 1000, 100):
        assert adds.add(7, list(range(first, first + 100)), "w") is None
    assert len(adds) == 1000 and len(adds._spans[7]) == 1 and not adds._loose
    assert adds.pop_run(7, 0, 249) == [("w", range(0, 250))]
    assert adds.add(7, [1000, 1001], "other") is None
    assert adds.pop_run(7, 250, 1001) == [("w", range(250, 1000)), ("other", range(1000, 1002))]
    assert len(adds) == 0 and not adds._loose and not adds._spans


def test_a_resend_below_the_spans_or_an_answer_out_of_order_falls_back_to_the_dict():
    adds = InflightAdds()
    assert adds.add(1, list(range(10, 20)), "w") is None
    assert adds.add(1, [12], "w") == 12  # already in flight
    assert adds.add(1, [5], "w") is None  # a re-send of an earlier id: per add
    assert adds.pop_run(1, 15, 16) == [("w", range(15, 17))]
    assert adds.pop_keys([(1, 5), (1, 99)]) == ["w", None]
    assert len(adds) == 8
    assert adds.add(1, [30, 30], "w") == 30 and len(adds) == 8  # twice in one send: none registered

