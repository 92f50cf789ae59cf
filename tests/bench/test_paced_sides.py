"""bench/paced_sides.py: both clients over both kinds of server, every add answered OK or the run fails; and the
fan-out to real bookies refuses to count a refused add as an answer."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import paced_sides  # noqa: E402
from bench.fanout_limits import KiB, fanout_run  # noqa: E402


def test_all_four_pairs_run_and_report(tmp_path: Path) -> None:
    result = paced_sides.run(tmp_path, seconds=1.0, repeats=1, rate=200.0)
    assert list(result["pairs"]) == list(paced_sides.PAIRS)
    for pair, figures in result["pairs"].items():
        (only,) = figures["runs"]
        assert 0 < only["p50_ms"] <= only["p99_ms"], pair
        assert figures["p99_ms"]["median"] == only["p99_ms"]
        servers = "bookie" if pair.endswith("bookies") else "durable"
        assert set(only["cpu_us_per_add"]) == {"client", *(f"{servers}-{index}" for index in range(3))}, pair
        assert len(only["framed_add_streams"]) == 3 and all(only["framed_add_streams"]), pair  # the framed ports
    assert list(tmp_path.iterdir()) == []  # every server's files removed


def test_rounds_rotate_the_order_of_the_pairs(tmp_path: Path, monkeypatch) -> None:
    order = []
    monkeypatch.setattr(paced_sides, "one_run", lambda pair, *_: order.append(pair) or {"p50_ms": 1.0, "p99_ms": 2.0})
    paced_sides.run(tmp_path, seconds=1.0, repeats=2, rate=10.0)
    assert order[:4] == list(paced_sides.PAIRS)
    assert order[4:] == list(paced_sides.PAIRS[1:] + paced_sides.PAIRS[:1])


def test_a_refused_add_fails_the_fanout_to_bookies(tmp_path: Path) -> None:
    with paced_sides.bookies(tmp_path) as (uri, pids, ledger_id, _framed_streams):
        with pytest.raises(RuntimeError, match="refused"):  # a ledger nobody created: the bookies refuse its adds
            fanout_run(uri, ledger_id + 1000, KiB, 0.3, 100, pids, 100.0)


def test_a_run_whose_adds_took_grpc_fails(tmp_path: Path, monkeypatch) -> None:
    """The tool measures the framed add path (docs/protocol.md W11): adds sent over gRPC instead fail the run."""
    monkeypatch.setattr(paced_sides, "fanout_run", lambda *args, **kwargs: fanout_run(*args, **{**kwargs,
                                                                                                "framed": False}))
    with pytest.raises(RuntimeError, match="framed add streams per server during the run: \\[0, 0, 0\\]"):
        paced_sides.one_run("fanout_over_bookies", tmp_path, 0.3, 100.0)
    with pytest.raises(RuntimeError, match="a durable server took adds over gRPC"):
        paced_sides.one_run("fanout_over_durable", tmp_path, 0.3, 100.0)
    assert list(tmp_path.iterdir()) == []
