"""A bookie that ends its add stream cleanly (an END with OK: its idle timeout, or a drain) just as the client writes
an add on it has not read that add: the writer sends it to the same bookie once more instead of replacing the bookie
(docs/protocol.md W2); only the same add left unanswered by a clean end twice is the bookie's failure. The decision
is ``protocol.add_answers.action_for_unanswered``; these tests script the interleaving over fake bookies (the real
race: tests/bookie/test_exhaustion.py, the client whose idle stream was ended)."""
from __future__ import annotations

import pytest

from pyspark_ledger.protocol.add_answers import AddAction, action_for_unanswered
from tests.client.conftest import PASSWORD, wait_until


def test_only_a_clean_end_not_met_before_sends_an_add_again():
    assert action_for_unanswered(ended_cleanly=True, sent_again_before=False) is AddAction.RETRY
    assert action_for_unanswered(ended_cleanly=True, sent_again_before=True) is AddAction.BOOKIE_FAILED
    assert action_for_unanswered(ended_cleanly=False, sent_again_before=False) is AddAction.BOOKIE_FAILED
    assert action_for_unanswered(ended_cleanly=False, sent_again_before=True) is AddAction.BOOKIE_FAILED
    # settled since (answered after all, or confirmed by the others): nothing to do after a clean end only
    assert action_for_unanswered(ended_cleanly=True, sent_again_before=False, settled=True) is None
    assert action_for_unanswered(ended_cleanly=True, sent_again_before=True, settled=True) is None
    assert action_for_unanswered(ended_cleanly=False, sent_again_before=False, settled=True) is AddAction.BOOKIE_FAILED


@pytest.mark.bookies(4)
def test_an_add_a_bookie_ended_its_stream_on_goes_to_it_again_and_it_keeps_its_place(make_client, cluster, store):
    client = make_client(add_timeout_s=5.0)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)  # Qa = 3: the entry waits for that bookie
    ended = writer.metadata.current_fragment.bookies[1]
    version = store.read_ledger(writer.ledger_id).version
    rule = cluster.end_stream(ended, op="add", count=1)
    assert [writer.append(b"entry-%d" % index) for index in range(5)] == list(range(5))
    assert rule.matched == 1
    assert store.read_ledger(writer.ledger_id).version == version, "a clean end caused an ensemble change"
    assert writer.metadata.current_fragment.bookies[1] == ended
    assert ended not in client._ctx.quarantine.current()
    assert all(ended in cluster.holders(writer.ledger_id, e) for e in range(5))
    writer.close()


@pytest.mark.bookies(4)
def test_an_add_left_unanswered_by_two_clean_ends_is_the_bookies_failure(make_client, cluster, store):
    client = make_client(add_timeout_s=5.0)
    writer = client.create_ledger(3, 3, 3, password=PASSWORD)
    ended = writer.metadata.current_fragment.bookies[2]
    rule = cluster.end_stream(ended, op="add", entry_id=0)  # every time, the add and its second send alike
    assert writer.append(b"entry-0") == 0  # confirmed once the replacement has it
    wait_until(lambda: ended not in writer.metadata.current_fragment.bookies, what=f"{ended} to be replaced")
    assert rule.matched == 2, "the add was not sent again once, exactly"
    assert "ended the add stream" in client._ctx.quarantine.reasons()[ended]
    writer.close()


@pytest.mark.bookies(4)
def test_an_add_confirmed_before_its_clean_end_is_noticed_is_not_sent_again(make_client, cluster, store, caplog):
    """The last bookie of the write set ends its stream on entry 0 after the other two answered it (Qa = 2): the
    entry is confirmed and its encoding dropped before the end is handled, so nothing goes to that bookie again
    (``action_for_unanswered``: settled), nothing fails, and the bookie keeps its place."""
    client = make_client(add_timeout_s=5.0)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    ended = writer.metadata.current_fragment.bookies[2]
    version = store.read_ledger(writer.ledger_id).version
    rule = cluster.end_stream(ended, op="add", entry_id=0)
    with caplog.at_level("INFO"):
        assert writer.append(b"entry-0") == 0
        cluster.settle()
        assert [writer.append(b"entry-%d" % index) for index in range(1, 4)] == [1, 2, 3]
        cluster.settle()
    assert rule.matched == 1, "the confirmed add was sent to the bookie again"
    assert not [record for record in caplog.records if record.levelname in ("ERROR", "CRITICAL")], caplog.text
    assert store.read_ledger(writer.ledger_id).version == version, "a clean end caused an ensemble change"
    assert all(ended in cluster.holders(writer.ledger_id, entry_id) for entry_id in range(1, 4))
    writer.close()
