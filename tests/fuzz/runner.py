"""Drive hypothesis inputs at a FuzzTarget: one input per example, the probe after each.

The bookie is one real process whose state carries over from input to input, so a failure is not raised
inside hypothesis (shrinking would replay inputs against a bookie that is already damaged and name a
misleading "minimal" input); it is recorded with the inputs that preceded it, the run goes on while the
bookie answers, and the test asserts on the recorded failures at the end.
"""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import FULL_CHECK_EVERY, FuzzTarget, fuzz_seed


def run_inputs(target: FuzzTarget, strategy: st.SearchStrategy, send: Callable[[Any], None],
               max_examples: int) -> None:
    """Send ``max_examples`` inputs drawn from ``strategy`` with ``send``; probe after each."""
    chosen = fuzz_seed()

    @settings(max_examples=max_examples, deadline=None, derandomize=chosen is None, database=None,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
              print_blob=False)
    @given(strategy)
    def one(value) -> None:
        if target.broken:
            return
        send(value)
        target.probe()
        if target.sent and target.sent % FULL_CHECK_EVERY == 0 and not target.broken:
            target.full_check()

    if chosen is not None:
        one = seed(chosen)(one)
    one()
