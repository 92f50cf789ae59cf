"""bench/instructions.py: instructions per batch and per add of a bookie's add path, counted by valgrind."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from tests.bench.valgrind import needs_valgrind  # noqa: E402
from bench import instructions  # noqa: E402


@needs_valgrind
def test_the_count_is_the_difference_of_a_short_and_a_long_run() -> None:
    row = instructions.per_add(2, 3)
    short, long = row["instructions"]
    assert row["batches"] == [3, 9] and long > short > 0
    assert row["per_batch"] == round((long - short) / 6) and row["per_add"] == round((long - short) / 12)
    assert 10_000 < row["per_batch"] < 10_000_000  # a bookie's batch of 2 adds: far more than nothing, far from a run


@needs_valgrind
def test_a_failing_child_fails_the_count(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the counted run failed"):
        instructions.counted_run(tmp_path / "missing.pickle", 1, 1)


def test_a_run_without_a_count_is_an_error() -> None:
    assert instructions.collected("==1== Events    : Ir\n==1== Collected : 12345\n") == 12345
    with pytest.raises(RuntimeError, match="no instruction count"):
        instructions.collected("valgrind: command not found")


@pytest.mark.parametrize("argv,message", [(["--adds", "0"], "--adds"), (["--adds", "10001"], "--adds"),
                                          (["--batches", "0"], "--batches"), (["--batches", "10001"], "--batches")])
def test_out_of_range_options_are_refused_by_name(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        instructions.main(argv)
    assert message in capsys.readouterr().err
