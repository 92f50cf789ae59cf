"""bench/bookie_batch.py: a bookie's CPU per AddBatch without gRPC, every add stored and answered OK, or the run
fails."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import bookie_batch  # noqa: E402
from bookie_server.limits import StreamLimits  # noqa: E402


def test_every_part_is_measured_over_every_batch(tmp_path: Path) -> None:
    result = bookie_batch.run(tmp_path, adds=2, count=40, repeats=2)
    assert len(result["runs"]) == 2
    for one in result["runs"]:
        assert set(one["us_per_batch"]) == set(bookie_batch.PARTS)
        assert all(value > 0 for value in one["us_per_batch"].values())
        assert 1 <= one["group_commits"] <= 40  # each batch waited for: at most one group commit each
    summary = result["us_per_batch"]["checks_and_storage"]
    assert summary["min"] <= summary["median"] <= summary["max"]
    assert list(tmp_path.iterdir()) == []  # the storage's directory is removed


def test_the_batches_are_what_a_client_sends(tmp_path: Path) -> None:
    from bookie_server.add_wire import decode_add_batch

    raws = bookie_batch.batches(3, 2)
    assert [[(add.ledger_id, add.entry_id) for add in decode_add_batch(raw).adds] for raw in raws] == [
        [(bookie_batch.LEDGER, e) for e in range(0, 3)], [(bookie_batch.LEDGER, e) for e in range(3, 6)]]


def test_adds_the_bookie_refuses_fail_the_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(bookie_batch, "StreamLimits", lambda **_: StreamLimits(max_entry_size=100))
    with pytest.raises(RuntimeError, match="not answered OK"):
        bookie_batch.run(tmp_path, adds=1, count=3, repeats=1)
