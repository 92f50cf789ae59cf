"""`ledger ledgers underreplicated` and `ledger ledgers rereplicate` against a real sandbox."""
from __future__ import annotations

import json

from tests.cli.conftest import ledger


def test_nothing_underreplicated_while_every_bookie_is_up(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        writer.append(b"x")
    text = ledger(sandbox, "ledgers", "underreplicated")
    assert text.returncode == 0 and "no under-replicated ledgers" in text.stdout
    assert json.loads(ledger(sandbox, "--json", "ledgers", "underreplicated").stdout) == []


def test_rereplicate_bad_input(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        writer.append(b"x")
    neither = ledger(sandbox, "ledgers", "rereplicate")
    assert neither.returncode == 2 and "--all" in neither.stderr
    both = ledger(sandbox, "ledgers", "rereplicate", str(writer.ledger_id), "--all")
    assert both.returncode == 2 and "not both" in both.stderr
    wrong = ledger(sandbox, "ledgers", "rereplicate", str(writer.ledger_id), "--password", "nope")
    assert wrong.returncode == 1 and "password" in wrong.stderr
    unknown = ledger(sandbox, "ledgers", "rereplicate", "987654", "--password", "pw")
    assert unknown.returncode == 1 and "987654" in unknown.stderr


def test_draining_a_live_bookie_needs_a_spare_then_moves_its_copies(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        for index in range(20):
            writer.append(b"entry-%d" % index)
    drained = writer.metadata.fragments[0].bookies[0]
    refused = ledger(sandbox, "ledgers", "rereplicate", str(writer.ledger_id), "--password", "pw",
                     "--bookie", drained)
    assert refused.returncode == 1 and "start another bookie" in refused.stderr
    assert client.ledger_metadata(writer.ledger_id).fragments[0].bookies[0] == drained, "nothing changed"
    spare = sandbox.add_bookie()
    moved = ledger(sandbox, "ledgers", "rereplicate", str(writer.ledger_id), "--password", "pw",
                   "--bookie", drained)
    assert moved.returncode == 0, moved.stderr
    assert f"{drained} -> {spare.bookie_id} (entries 0..19, 20 copied)" in moved.stdout
    assert client.ledger_metadata(writer.ledger_id).fragments[0].bookies[0] == spare.bookie_id
    sandbox.stop_bookie(sandbox.bookie_ids.index(drained))
    reader = client.open_ledger(writer.ledger_id, b"pw", recovery=False)
    assert [entry.data for entry in reader.read(0, 19)] == [b"entry-%d" % i for i in range(20)]
    sandbox.start_bookie(sandbox.bookie_ids.index(drained))


def test_autorecovery_once_with_every_bookie_up_and_bad_settings(sandbox, client):
    with client.create_ledger(3, 3, 2, password=b"pw") as writer:
        writer.append(b"x")
    once = ledger(sandbox, "autorecovery", "--once", "--password", "pw")
    assert once.returncode == 0 and "nothing to re-replicate" in once.stdout, once.stderr
    as_json = ledger(sandbox, "--json", "autorecovery", "--once", "--password", "pw")
    assert json.loads(as_json.stdout) == {"lost_bookies": [], "recovered": [], "repaired": [], "failed": []}
    bad = ledger(sandbox, "autorecovery", "--interval", "0")
    assert bad.returncode == 2 and "interval_s must be > 0" in bad.stderr

    if len(sandbox.bookie_ids) < 4:
        sandbox.add_bookie()  # a spare to copy to (the drain test above may have added it)
    gone = writer.metadata.fragments[0].bookies[0]
    sandbox.stop_bookie(sandbox.bookie_ids.index(gone))  # deregisters at once
    try:
        repaired = ledger(sandbox, "autorecovery", "--once", "--password", "pw")
        assert repaired.returncode == 0, repaired.stderr
        assert f"ledger {writer.ledger_id}: {gone} -> " in repaired.stdout
        assert gone not in client.ledger_metadata(writer.ledger_id).fragments[0].bookies
    finally:
        sandbox.start_bookie(sandbox.bookie_ids.index(gone))


def test_autorecovery_recovers_a_ledger_left_open_on_a_lost_bookie(sandbox, client):
    bad = ledger(sandbox, "autorecovery", "--open-ledger-grace", "soon", "--password", "pw")
    assert bad.returncode == 2 and "--open-ledger-grace" in bad.stderr and "'off'" in bad.stderr
    if len(sandbox.bookie_ids) < 4:
        sandbox.add_bookie()
    writer = client.create_ledger(3, 3, 2, password=b"pw")
    for index in range(5):
        writer.append(b"open-%d" % index)
    writer.abort("the writer's process died")
    gone = writer.metadata.fragments[0].bookies[0]
    sandbox.stop_bookie(sandbox.bookie_ids.index(gone))
    try:
        waited = ledger(sandbox, "autorecovery", "--once", "--password", "pw")  # grace 30 s: left alone
        assert waited.returncode == 0 and client.ledger_metadata(writer.ledger_id).state == "OPEN", waited.stderr
        off = ledger(sandbox, "autorecovery", "--once", "--open-ledger-grace", "off", "--password", "pw")
        assert off.returncode == 0 and client.ledger_metadata(writer.ledger_id).state == "OPEN", off.stderr
        now = ledger(sandbox, "autorecovery", "--once", "--open-ledger-grace", "0", "--password", "pw")
        assert now.returncode == 0, now.stderr
        assert f"ledger {writer.ledger_id}: was open on a lost bookie; recovered" in now.stdout
        md = client.ledger_metadata(writer.ledger_id)
        assert md.state == "CLOSED" and md.last_entry_id == 4
        assert all(gone not in fragment.bookies for fragment in md.fragments)
        reader = client.open_ledger(writer.ledger_id, b"pw", recovery=False)
        assert [entry.data for entry in reader.read(0, 4)] == [b"open-%d" % i for i in range(5)]
    finally:
        sandbox.start_bookie(sandbox.bookie_ids.index(gone))
