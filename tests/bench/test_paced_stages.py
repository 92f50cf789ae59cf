"""bench/paced_stages.py: the stage gaps are taken for the bookie whose answer completed the quorum."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench import paced_stages  # noqa: E402

LEDGER = 9


def bookie_records(offset: float) -> list:
    """One bookie's probe records for entries 0 and 1, each stage ``offset`` later than the previous bookie's."""
    records = []
    for entry in (0, 1):
        base = 10.0 * entry + offset
        records += [("recv", base + 1.0, [(LEDGER, entry)]),
                    ("store", base + 1.1, base + 1.2, base + 3.0, [(LEDGER, entry)]),
                    ("answer", base + 3.5, base + 3.6, [(LEDGER, entry)]),
                    ("commit", base + 1.3, base + 1.4, base + 2.9, 1, base + 1.2)]
    records.append(("gc", 2, 11.5 + offset, 11.55 + offset))
    return records


def test_gaps_are_those_of_the_second_answer_and_full_collections_are_counted():
    stamps = [(0, 0.0, 6.0), (1, 10.0, 16.0)]  # (entry, called, done)
    client = []
    for entry in (0, 1):
        base = 10.0 * entry
        for index, bookie in enumerate(("b0", "b1", "b2")):
            client.append(("take", base + 0.5, bookie, [(LEDGER, entry)]))
            client.append(("deliver", base + 4.0 + index, bookie, [(LEDGER, entry)]))
    bookies = {"b0": bookie_records(0.0), "b1": bookie_records(0.5), "b2": bookie_records(0.9)}
    result = paced_stages.analyse(LEDGER, stamps, client, bookies)
    gaps = result["gaps_for_the_quorum_bookie"]
    assert gaps["taken -> received"]["p50_ms"] == 1000.0  # bookie b1 (stamps 0.5 s later): 0.5 + 1.0 - 0.5
    assert gaps["submitted -> durable"]["p50_ms"] == 1800.0
    assert gaps["answered -> delivered"]["p50_ms"] == 1000.0  # b1 answered at 4.0, delivered at 5.0
    assert result["whole_add"]["p50_ms"] == 6000.0
    assert result["gc"]["bookie b1"]["by_generation"]["2"]["count"] == 1
    assert result["journals"]["b1"]["fdatasync"]["p50_ms"] == 1500.0
    assert result["adds_per_batch"]["adds_per_AddBatch"] == 1.0
