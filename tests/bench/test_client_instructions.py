"""bench/client_instructions.py: instructions per paced add of the client, counted by valgrind against 3 real
bookies."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from tests.bench.valgrind import needs_valgrind  # noqa: E402
from bench import client_instructions  # noqa: E402


@needs_valgrind
def test_a_real_client_counted_twice_gives_the_difference_per_add() -> None:
    row = client_instructions.per_add(3, 20.0)
    short, long = row["instructions"]
    assert row["adds"] == [3, 9] and long > short > 0
    assert row["per_add"] == round((long - short) / 6)
    assert 50_000 < row["per_add"] < 20_000_000  # a paced add's whole client path: far more than nothing


def test_the_count_is_the_difference_of_the_two_runs(monkeypatch) -> None:
    monkeypatch.setattr(client_instructions, "counted_run", lambda uri, adds, rate: 1_000_000 + 700 * adds)
    monkeypatch.setattr(client_instructions.time, "sleep", lambda seconds: None)
    import pyspark_ledger.testing.bookies as bookies

    class NoCluster:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass
    monkeypatch.setattr(bookies, "BookieCluster", NoCluster)
    row = client_instructions.per_add(10, 20.0)
    assert row["instructions"] == [1_007_000, 1_021_000] and row["per_add"] == 700


@needs_valgrind
def test_a_failing_client_fails_the_count() -> None:
    with pytest.raises(RuntimeError, match="the counted client failed"):
        client_instructions.counted_run("sqlite:////nonexistent/dir/metadata.db", 1, 20.0)


@pytest.mark.parametrize("argv,message", [(["--adds", "0"], "--adds"), (["--adds", "2001"], "--adds"),
                                          (["--rate", "0"], "--rate"), (["--rate", "101"], "--rate")])
def test_out_of_range_options_are_refused_by_name(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        client_instructions.main(argv)
    assert message in capsys.readouterr().err
