"""The demo's bookie killer (``demo/bookie_killer.py``): the victim, the proof, and each step of pause, kill,
continue, scripted against metadata and a sandbox that record what was done."""
from __future__ import annotations

import pytest

from pyspark_ledger.demo import bookie_killer
from pyspark_ledger.demo.bookie_killer import BookieKiller, Kill, choose_victim, proving_ledger
from pyspark_ledger.demo.report import kill_line
from pyspark_ledger.errors import InvalidStateError
from pyspark_ledger.metadata.model import CLOSED, OPEN, Fragment, LedgerMetadata

A, B, C, D = "127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003", "127.0.0.1:1004"


def _ledger(ledger_id: int, *fragments, state=OPEN, ctime_ms=0, partition=0, last=-1, length=0) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=ledger_id, ensemble_size=3, write_quorum=3, ack_quorum=2,
                          fragments=tuple(Fragment(first, tuple(bookies)) for first, bookies in fragments),
                          state=state, last_entry_id=last, length=length, ctime_ms=ctime_ms,
                          custom_metadata={"stream": b"s", "partition": str(partition).encode()})


# --- victim choice ---------------------------------------------------------------------------


def test_victim_is_the_live_bookie_of_the_most_ledgers_being_written():
    ledgers = [_ledger(1, (0, [A, B, C])), _ledger(2, (0, [B, C, D])), _ledger(3, (0, [A, B, D]))]
    victim = choose_victim(ledgers, alive=[A, B, C, D])
    assert (victim.bookie_id, victim.ledger_id, victim.open_ledgers) == (B, 3, 3)
    victim = choose_victim(ledgers, alive=[A, C, D])  # B is dead already: among the live ones
    assert victim.bookie_id in (A, C, D) and victim.open_ledgers == 2


def test_victim_follows_the_current_fragment_and_needs_a_candidate():
    changed = _ledger(5, (0, [A, B, C]), (9, [D, B, C]))
    assert choose_victim([changed], alive=[A, D]).bookie_id == D
    assert choose_victim([], alive=[A, B, C, D]) is None


def test_proof_is_an_open_ledger_begun_during_the_pause_with_the_victim_in_its_ensemble():
    ledgers = [_ledger(1, (0, [A, B, C])),   # existed when the victim was paused
               _ledger(2, (0, [A, C, D])),   # the victim is not in its ensemble
               _ledger(3, (0, [B, C, D])),
               _ledger(4, (0, [A, B, D]), (2, [A, C, D]))]  # the victim was replaced already
    assert proving_ledger(B, {1}, ledgers).ledger_id == 3
    assert proving_ledger(B, {1, 3}, ledgers) is None
    assert proving_ledger(B, set(), [_ledger(1, (0, [A, B, C])), _ledger(5, (0, [B, C, D]))]).ledger_id == 5


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.on_sleep = lambda: None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep()


class _Client:
    """The metadata a killer sees, scripted."""

    def __init__(self) -> None:
        self.ledgers: dict[int, LedgerMetadata] = {}

    def add(self, metadata: LedgerMetadata) -> None:
        self.ledgers[metadata.ledger_id] = metadata

    def list_ledgers(self) -> list[int]:
        return sorted(self.ledgers)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self.ledgers[ledger_id]


class _Bookie:
    def __init__(self, bookie_id: str, pid: int) -> None:
        self.bookie_id, self.pid, self.alive = bookie_id, pid, True

    def is_running(self) -> bool:
        return self.alive


class _Sandbox:
    def __init__(self, uri: str = "zk://127.0.0.1:2181/demo") -> None:
        self.metadata_uri = uri
        self.bookies = [_Bookie(bookie_id, 500 + index) for index, bookie_id in enumerate((A, B, C, D))]
        self.events: list[tuple[str, int]] = []
        self.on_pause = self.on_kill = lambda: None

    def pause_bookie(self, index: int) -> None:
        self.events.append(("pause", index))
        self.on_pause()

    def resume_bookie(self, index: int) -> None:
        self.events.append(("resume", index))

    def kill_bookie(self, index: int) -> None:
        self.events.append(("kill", index))
        self.bookies[index].alive = False
        self.on_kill()


def _killer(monkeypatch, sandbox=None):
    clock, client, sandbox = _Clock(), _Client(), sandbox or _Sandbox()
    monkeypatch.setattr(bookie_killer, "time", clock)
    client.add(_ledger(1, (0, [A, B, C])))
    client.add(_ledger(2, (0, [B, C, D])))
    client.add(_ledger(3, (0, [A, C, D]), state=CLOSED))
    return clock, client, sandbox, BookieKiller(sandbox, client, "s")


def test_the_killer_pauses_the_busiest_bookie_and_kills_it_once_a_ledger_begun_meanwhile_proves_it(monkeypatch):
    clock, client, sandbox, killer = _killer(monkeypatch)
    # a ledger that began as the pause took effect could have entries the victim acknowledged: it is listed
    # after the pause, so it never counts as proof
    sandbox.on_pause = lambda: client.add(_ledger(7, (0, [A, B, C])))
    assert killer.step(1.0) is None and sandbox.events == [("pause", 1)]  # B: in the current ensemble of 1 and 2
    assert killer.step(1.2) is None and clock.now == pytest.approx(100.2)  # looked for proof for its budget
    client.add(_ledger(8, (0, [A, C, D])))  # begun during the pause, without the victim
    assert killer.step(1.4) is None and sandbox.events == [("pause", 1)]
    polls = []
    clock.on_sleep = lambda: polls.append(clock.now) if len(polls) < 3 else client.add(_ledger(9, (0, [A, B, D])))
    kill = killer.step(1.6)
    assert sandbox.events == [("pause", 1), ("kill", 1)] and len(polls) == 3  # seen at the first poll after it began
    paused_s = pytest.approx(clock.now - 100, abs=1e-3)
    assert kill == Kill(1, B, 501, 9, 0, 4, pytest.approx(1.68), paused_s=paused_s, proven=True, first_entry_id=0,
                        ensemble=(A, B, D))
    assert kill.seen_fragment == (9, 0, (A, B, D))
    assert "ledger 9, begun with it while it was paused (so none of its entries is acknowledged by it), was still " \
        "being written; 3 other open ledgers had it" in kill_line(kill, "bookie 1")
    assert killer.finish(2.0) is None and sandbox.events[-1] == ("kill", 1)  # killed once


def test_a_pause_without_proof_is_continued_and_tried_again(monkeypatch):
    clock, client, sandbox, killer = _killer(monkeypatch)
    killer.step(1.0)
    killer.step(1.2, budget_s=bookie_killer.PROOF_WINDOW_S - 0.05)
    assert sandbox.events == [("pause", 1)]
    killer.step(2.0)
    assert sandbox.events == [("pause", 1), ("resume", 1)] and clock.now == pytest.approx(102.0, abs=0.03)
    clock.now += bookie_killer.RESUMED_S - 0.01
    killer.step(3.0)
    assert sandbox.events[-1] == ("resume", 1)  # resumed long enough to renew its registration
    clock.now += 0.01
    killer.step(3.1)
    assert sandbox.events[-1] == ("pause", 1) and killer.pauses == 2


def test_a_victim_paused_while_holding_the_sqlite_write_lock_is_continued_at_once(monkeypatch, tmp_path):
    sandbox = _Sandbox(f"sqlite:///{tmp_path}/metadata.db")
    clock, client, sandbox, killer = _killer(monkeypatch, sandbox)
    holder = {"pid": 501}
    monkeypatch.setattr(bookie_killer, "write_lock_holder", lambda path: holder["pid"])
    killer.step(1.0)
    assert sandbox.events == [("pause", 1), ("resume", 1)]
    clock.now += bookie_killer.LOCK_RETRY_S
    holder["pid"] = 777  # another process holds it now: not the paused one's doing
    killer.step(1.1)
    assert sandbox.events[-1] == ("pause", 1) and killer.pauses == 2


def test_the_stream_ending_during_a_pause_kills_without_proof_and_an_early_stop_continues(monkeypatch):
    clock, client, sandbox, killer = _killer(monkeypatch)
    assert killer.finish(1.0) is None and sandbox.events == []  # nothing paused: nothing to kill
    killer.step(1.0)
    clock.now += 1.0
    kill = killer.finish(2.0)
    assert sandbox.events == [("pause", 1), ("kill", 1)] and kill.proven is False and kill.ledger_id is None
    assert "as the stream ended" in kill_line(kill, "bookie 1") and "not certain" in kill_line(kill, "bookie 1")
    clock, client, sandbox, killer = _killer(monkeypatch)
    killer.step(1.0)
    killer.release()
    killer.release()
    assert sandbox.events == [("pause", 1), ("resume", 1)]


def test_a_pause_that_fails_is_still_continued_when_the_demo_stops(monkeypatch):
    clock, client, sandbox, killer = _killer(monkeypatch)

    def stuck() -> None:
        raise InvalidStateError("bookie 1 did not stop within 5 s of SIGSTOP")

    sandbox.on_pause = stuck
    with pytest.raises(InvalidStateError):
        killer.step(1.0)
    killer.release()
    assert sandbox.events == [("pause", 1), ("resume", 1)]


def test_a_proving_ledger_closed_before_the_kill_landed_is_no_proof(monkeypatch):
    clock, client, sandbox, killer = _killer(monkeypatch)
    killer.step(1.0)
    client.add(_ledger(8, (0, [A, B, D])))
    sandbox.on_kill = lambda: client.add(_ledger(8, (0, [A, B, D]), state=CLOSED, last=3, length=40))
    kill = killer.step(1.2)
    assert (kill.ledger_id, kill.proven) == (8, False)
    assert "was closed when the kill landed" in kill_line(kill, "bookie 1")
