"""Add answers as runs against real bookie processes (docs/protocol.md W9): negotiated both ways, and in order.

An "old" side is simulated by turning the form off: a bookie started with ``--no-add-answer-runs`` answers
as a bookie that ignores the request does, a client with ``add_answer_runs=False`` (or a raw stub without
the metadata) asks for nothing, as an older client does."""
from __future__ import annotations

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.client.writer_answers import AddAnswers
from pyspark_ledger.wire.ack_runs import ASK_FOR_RUNS
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import KEY, entry, wait_until

PASSWORD = b"runs"


def adds(ledger_id: int, entry_ids, keyless=()) -> pb.AddBatch:
    return pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=b"" if e in keyless else KEY,
                                           body=entry(ledger_id, e)) for e in entry_ids])


def answers(stub, batches, metadata=None) -> tuple[list, list]:
    """The messages of one AddStream, and every answer as (ledger, entry, status, message) in arrival order,
    checking that no message holds a run after a result (W9)."""
    messages = list(stub.AddStream(iter(batches), metadata=metadata, timeout=30))
    flat = []
    for message in messages:
        for run in message.acked:
            assert run.first_entry_id <= run.last_entry_id
            flat += [(run.ledger_id, e, pb.OK, "") for e in range(run.first_entry_id, run.last_entry_id + 1)]
        flat += [(r.ledger_id, r.entry_id, r.status, r.message) for r in message.results]
    return messages, flat


def test_W9_a_bookie_answers_in_runs_only_a_client_that_asks(make_bookie, raw_stub):
    stub = raw_stub(make_bookie(checkpoint_interval=0).start())
    batches = [adds(40, range(0, 300)), adds(40, range(300, 310)), adds(41, range(5))]
    messages, flat = answers(stub, batches, metadata=ASK_FOR_RUNS)
    assert sorted(flat) == sorted([(40, e, pb.OK, "") for e in range(310)] + [(41, e, pb.OK, "") for e in range(5)])
    assert all(not message.results for message in messages)
    assert sum(len(message.acked) for message in messages) <= 3 * len(messages)  # runs, not one per entry

    old_messages, old_flat = answers(stub, [adds(42, range(50))])  # an old client: no metadata
    assert all(not message.acked for message in old_messages)
    assert old_flat == [(42, e, pb.OK, "") for e in range(50)]


def test_W9_a_bookie_with_runs_off_answers_each_add_whatever_the_client_asks(make_bookie, raw_stub):
    stub = raw_stub(make_bookie(checkpoint_interval=0, no_add_answer_runs=True).start())
    messages, flat = answers(stub, [adds(43, range(100))], metadata=ASK_FOR_RUNS)
    assert all(not message.acked for message in messages)
    assert flat == [(43, e, pb.OK, "") for e in range(100)]


def test_W9_refusals_keep_their_status_message_and_place_among_the_runs(make_bookie, raw_stub):
    """Adds without a key are refused (UNAUTHORIZED) before the others are stored: both forms give the same
    answers in the same order, the refusals with their messages."""
    runs_bookie = raw_stub(make_bookie("runs", checkpoint_interval=0).start())
    per_add_bookie = raw_stub(make_bookie("per-add", checkpoint_interval=0, no_add_answer_runs=True).start())
    batches = [adds(44, range(0, 20), keyless={3, 11}), adds(44, range(20, 30)), adds(44, range(30, 40), keyless={35})]
    _, with_runs = answers(runs_bookie, batches, metadata=ASK_FOR_RUNS)
    _, per_add = answers(per_add_bookie, batches, metadata=ASK_FOR_RUNS)
    refused = [(ledger_id, e, status) for ledger_id, e, status, _ in with_runs if status != pb.OK]
    assert refused == [(44, 3, pb.UNAUTHORIZED), (44, 11, pb.UNAUTHORIZED), (44, 35, pb.UNAUTHORIZED)]
    assert all("master key" in message for _, _, status, message in with_runs if status != pb.OK)
    assert sorted(with_runs) == sorted(per_add)
    key = [answer[1] for answer in with_runs]
    assert sorted(key) == list(range(40)) and len(set(key)) == 40


@pytest.mark.parametrize("client_runs", [True, False], ids=["new-client", "old-client"])
def test_W9_a_writer_over_new_and_old_bookies_confirms_in_order_and_reads_back(metadata_uri, make_bookie, monkeypatch,
                                                                              client_runs):
    calls = {"runs": 0, "results": 0}
    on_acks, on_results = AddAnswers._on_acks, AddAnswers._on_results

    def counted_acks(self, bookie, spans):
        calls["runs"] += 1
        return on_acks(self, bookie, spans)

    def counted_results(self, bookie, results):
        calls["results"] += 1
        return on_results(self, bookie, results)
    monkeypatch.setattr(AddAnswers, "_on_acks", counted_acks)
    monkeypatch.setattr(AddAnswers, "_on_results", counted_results)
    bookies = [make_bookie("new-0").start(), make_bookie("new-1").start(),
               make_bookie("old", no_add_answer_runs=True).start()]
    config = ClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, close_timeout_s=10.0, add_answer_runs=client_runs)
    with LedgerClient(metadata_uri, config) as client:
        wait_until(lambda: len(client.bookies()) >= len(bookies), 30, "every bookie to register")
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        completed: list[int] = []
        futures = []
        for index in range(2000):
            future = writer.append_async(b"entry %06d" % index)
            future.add_done_callback(lambda done: completed.append(done.result()))
            futures.append(future)
        assert [future.result(30) for future in futures] == list(range(2000))
        assert completed == list(range(2000))  # W1: confirmed strictly in entry order
        assert writer.last_add_confirmed == 1999
        writer.close()
        read = [entry.data for entry in client.open_ledger(writer.ledger_id, PASSWORD).read()]
        assert read == [b"entry %06d" % index for index in range(2000)]
    assert calls["results"] > 0  # the old bookie (and, for an old client, every bookie) answers per add
    assert (calls["runs"] > 0) == client_runs
