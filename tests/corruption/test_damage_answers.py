"""How the client counts answers that come from damage (issue 12 part 5): IO_ERROR is unknown, never a
negative, in range reads and in recovery; a body whose digest does not verify is a failed read from that
bookie, another replica is read, and the bad bytes never reach the user. Exact interleavings: fake bookies."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import BookieUnavailableError, NoSuchEntryError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY
from pyspark_ledger.protocol.answers import AnswerKind, ReadAnswer, kind_for_status
from pyspark_ledger.protocol.reads import ReadPlan, ReadStepKind
from tests.client.conftest import PASSWORD

QUORUMS = (3, 3, 2)


def test_io_error_is_unknown_and_two_negatives_are_needed_to_call_an_entry_absent():
    assert kind_for_status("IO_ERROR") is AnswerKind.UNKNOWN
    plan = ReadPlan(4, ("a", "b", "c"), 3, 2)
    first, second, third = plan.replicas
    assert plan.first().bookie == first
    step = plan.on_answer(first, ReadAnswer.unknown("IO_ERROR: unreadable"))
    assert step.kind is ReadStepKind.SEND and step.bookie == second
    step = plan.on_answer(second, ReadAnswer.no_such_entry())
    assert step.kind is ReadStepKind.SEND and step.bookie == third
    step = plan.on_answer(third, ReadAnswer.unknown("IO_ERROR: unreadable"))
    assert step.kind is ReadStepKind.FAILED  # one negative of the Qw - Qa + 1 = 2 needed: unknown


def ledger_with_last_entry_on_two_bookies(client, cluster, count: int = 5):
    """Entries 0..count-1 acknowledged (Qa=2), the last one not stored by the third bookie; the writer is gone
    with the ledger OPEN. Returns (writer, the bookies holding the last entry, the one that misses it)."""
    writer = client.create_ledger(*QUORUMS, password=PASSWORD)
    for index in range(count - 1):
        writer.append(b"entry-%d" % index)
    missing = writer.metadata.current_fragment.bookies[2]
    cluster.hold_request(missing, op="add")  # never carried: that bookie never sees the last add
    writer.append(b"entry-%d" % (count - 1))
    holders = [b for b in writer.metadata.current_fragment.bookies if b != missing]
    assert cluster.holders(writer.ledger_id, count - 1) == set(holders)
    client.close()  # the writer dies: the ledger stays OPEN
    return writer, holders, missing


def test_recovery_with_io_error_and_no_such_entry_and_a_down_bookie_does_not_close_short(client, make_client,
                                                                                          cluster):
    writer, (down, damaged), missing = ledger_with_last_entry_on_two_bookies(client, cluster)
    last = 4
    cluster.set_down(down)
    rules = [cluster.fail(damaged, op=op, status="IO_ERROR", entry_id=last) for op in ("read", "fence")]
    recoverer = make_client(seed=2)
    with pytest.raises(RecoveryError):
        recoverer.open_ledger(writer.ledger_id, PASSWORD)
    assert recoverer.ledger_metadata(writer.ledger_id).state == IN_RECOVERY  # not closed at 3
    for rule in rules:
        rule.release()
    cluster.set_down(down, False)
    reader = make_client(seed=3).open_ledger(writer.ledger_id, PASSWORD)
    md = reader.metadata
    assert md.state == CLOSED and md.last_entry_id == last
    assert [e.data for e in reader.read()] == [b"entry-%d" % i for i in range(last + 1)]


def test_recovery_with_io_error_and_no_such_entry_reads_the_third_replica(client, make_client, cluster):
    writer, (intact, damaged), missing = ledger_with_last_entry_on_two_bookies(client, cluster)
    last = 4
    for op in ("read", "fence"):
        cluster.fail(damaged, op=op, status="IO_ERROR", entry_id=last)
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert reader.metadata.state == CLOSED and reader.metadata.last_entry_id == last
    assert list(reader.read(last, last))[0].data == b"entry-%d" % last


def test_range_read_with_io_error_and_no_such_entry_is_an_error_not_absence(client, make_client, cluster):
    writer = client.create_ledger(*QUORUMS, password=PASSWORD)
    for index in range(5):
        writer.append(b"entry-%d" % index)
    writer.close()
    a, b, c = writer.metadata.current_fragment.bookies
    cluster.fail(a, op="read", status="IO_ERROR", entry_id=2)
    cluster.fail(b, op="read", status="NO_SUCH_ENTRY", entry_id=2)
    cluster.set_down(c)
    reader = make_client(seed=2, read_timeout_s=2.0).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    with pytest.raises(BookieUnavailableError) as caught:
        list(reader.read(2, 2))
    assert not isinstance(caught.value, NoSuchEntryError)
    cluster.set_down(c, False)
    assert list(reader.read(2, 2))[0].data == b"entry-2"  # the third replica has it


def test_recovery_skips_a_replica_whose_digest_does_not_verify(client, make_client, cluster):
    writer, (first, second), missing = ledger_with_last_entry_on_two_bookies(client, cluster)
    last = 4
    cluster.corrupt(first, writer.ledger_id, last)
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert reader.metadata.last_entry_id == last
    assert [e.data for e in reader.read()] == [b"entry-%d" % i for i in range(last + 1)]
    cluster.corrupt(first, writer.ledger_id, last)  # (recovery's write-back may have repaired it)
    again = make_client(seed=3).open_ledger(writer.ledger_id, PASSWORD)
    assert list(again.read(last, last))[0].data == b"entry-%d" % last  # read from the intact replica
    cluster.set_down(second)  # the only verified copy is unreachable: an error, never the corrupt bytes
    with pytest.raises(BookieUnavailableError, match="corrupt replica"):
        list(again.read(last, last))
