"""The corruption suite: damage a stopped bookie's journal, entry-log, index and checkpoint files at seeded
random offsets, restart it, and check that the client never returns wrong bytes and that recovery never closes
a ledger short of its last acknowledged entry (issue 12, "Tests and figures").

Each round: 3 real bookie processes, SQLite metadata, E=Qw=3, Qa=2. Two ledgers are written and closed; a
writer child process writes a third, and while one bookie (S) is SIGSTOPped, a few more entries, acknowledged
by the other two only (the victim V and T); then the writer is killed with kill -9 (the ledger stays OPEN) and
S is killed. V is stopped (kill -9 or SIGTERM, by round), its files are damaged (bit flips, zeroed ranges,
truncation; which files by round: journal, entry logs, index, checkpoint files, all), and V and S are
restarted. V may refuse to start: then its message must say why, without a traceback. Then
  A. all bookies up: every entry of the closed ledgers reads back exactly;
  B. T down as well: every read returns exactly the bytes written or raises; recovery of the open ledger
     fails or closes it at or beyond its last acknowledged entry (S lacks the tail, so V's answers decide);
  C. T back, and a spare bookie for recovery to write back to (V may have refused to start, or refuse adds to
     a ledger whose index it found damaged, as it must): recovery closes the
     open ledger at or beyond its last acknowledged entry, and every acknowledged entry reads back exactly.

CI runs one round per damage target (about 40 s in all); ``LEDGER_CORRUPTION_ROUNDS=N`` runs N rounds
(seeds ``LEDGER_CORRUPTION_SEED`` .. + N - 1), ``LEDGER_CORRUPTION_TARGET`` pins the damage target. A failing
round prints its seed and every damage it did.
"""
from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.errors import BookieProcessError, LedgerError
from pyspark_ledger.testing.bookies import BookieCluster, BookieProcess, child_env
from tests.corruption.damage import TARGETS, damage
from tests.corruption.payloads import PASSWORD, payload
from tests.waiting import wait_until

ROUNDS_ENV = "LEDGER_CORRUPTION_ROUNDS"
SEED_ENV = "LEDGER_CORRUPTION_SEED"
TARGET_ENV = "LEDGER_CORRUPTION_TARGET"
CLOSED_LEDGERS, CLOSED_ENTRIES = 2, 40
OPEN_ENTRIES, TAIL_ENTRIES = 30, 6
CONFIG = ClientConfig(add_timeout_s=60.0, read_timeout_s=3.0, recovery_timeout_s=30.0, close_timeout_s=20.0,
                      long_poll_timeout_s=1.0)
BOOKIE_FLAGS = dict(checkpoint_interval=0.5, entry_log_size=32 * 1024, journal_file_size=16 * 1024)
REFUSAL_WORDS = ("corrupt", "damaged", "missing", "skip-journal-corruption", "checksum", "cut short")


def seeds() -> list[int]:
    first = int(os.environ.get(SEED_ENV, "0"))
    return list(range(first, first + int(os.environ.get(ROUNDS_ENV, str(len(TARGETS))))))


class WriterChild:
    """The writer process (``writer_child``): ``write(n)`` returns once n more adds are acknowledged."""

    def __init__(self, uri: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.corruption.writer_child", uri],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=child_env(), cwd=str(Path(__file__).resolve().parents[2]))
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ledger_id = int(self._next_line().split()[1])
        self.confirmed: set[int] = set()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put("")

    def _next_line(self, timeout: float = 60.0) -> str:
        line = self._lines.get(timeout=timeout)
        if not line:
            raise AssertionError(f"the writer child exited ({self.process.poll()})")
        return line

    def write(self, count: int) -> None:
        self.process.stdin.write(f"write {count}\n")
        self.process.stdin.flush()
        while (line := self._next_line()) != "written":
            self.confirmed.add(int(line.split()[1]))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


def read_exact_or_error(client: LedgerClient, ledger_id: int, last: int, *, must_succeed: bool) -> int:
    """Read entries 0..last: each one returned must be exactly what was written; an error stops the read
    (allowed unless ``must_succeed``). Returns how many entries were read."""
    count = 0
    try:
        reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
        for entry in reader.read(0, last):
            assert bytes(entry.data) == payload(ledger_id, entry.entry_id), \
                f"WRONG BYTES for ledger {ledger_id} entry {entry.entry_id}"
            assert entry.entry_id == count, f"ledger {ledger_id}: entry {entry.entry_id} returned out of order"
            count += 1
    except LedgerError:
        if must_succeed:
            raise
    return count


def recover(client: LedgerClient, ledger_id: int, last_acked: int, report: list[str]) -> bool:
    """Recovery either fails (False) or closes the ledger at or beyond its last acknowledged entry (True)."""
    try:
        reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
    except LedgerError as exc:
        report.append(f"recovery failed: {exc}")
        return False
    md = reader.metadata
    assert md.is_closed and md.last_entry_id >= last_acked, \
        f"RECOVERY CLOSED ledger {ledger_id} at {md.last_entry_id}, short of acknowledged entry {last_acked}"
    return True


@pytest.mark.parametrize("seed", seeds())
def test_damaged_bookie_never_yields_wrong_bytes_or_a_short_ledger(tmp_path, seed):
    rng = random.Random(seed)
    target = os.environ.get(TARGET_ENV) or TARGETS[seed % len(TARGETS)]
    graceful = seed % 2 == 1
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    cluster = BookieCluster(3, tmp_path / "bookies", uri, **BOOKIE_FLAGS)
    clients: list[LedgerClient] = []
    writer = None
    spare = BookieProcess(tmp_path / "spare", uri, **BOOKIE_FLAGS)
    started = time.monotonic()
    report = [f"seed {seed}: target {target}, victim stopped {'with SIGTERM' if graceful else 'with kill -9'}"]

    def client() -> LedgerClient:
        clients.append(LedgerClient(uri, CONFIG))
        return clients[-1]
    try:
        cluster.start()
        first = client()
        wait_until(lambda: len(first.bookies()) >= 3, what="3 bookies registered")
        closed_ids = []
        for _ in range(CLOSED_LEDGERS):
            with first.create_ledger(3, 3, 2, password=PASSWORD) as ledger:
                futures = [ledger.append_async(payload(ledger.ledger_id, n)) for n in range(CLOSED_ENTRIES)]
                assert [future.result(30) for future in futures] == list(range(CLOSED_ENTRIES))
            closed_ids.append(ledger.ledger_id)

        writer = WriterChild(uri)
        writer.write(OPEN_ENTRIES)
        victim, stopped, other = rng.sample(list(cluster.bookies), 3)
        report.append(f"victim {victim.bookie_id}, stopped during the tail {stopped.bookie_id}, "
                      f"other {other.bookie_id}, open ledger {writer.ledger_id}, closed {closed_ids}")
        stopped.pause()
        writer.write(TAIL_ENTRIES)  # acknowledged by the victim and the other bookie only
        writer.kill()
        last_acked = max(writer.confirmed)
        assert last_acked == OPEN_ENTRIES + TAIL_ENTRIES - 1
        stopped.kill()
        time.sleep(rng.uniform(0, 1.0))  # let a checkpoint run, or not
        victim.stop() if graceful else victim.kill()

        report.extend(damage(victim.data_dir, target, rng, rng.randint(1, 3)))
        report.append(f"{time.monotonic() - started:.1f} s: damaged")
        stopped.start()
        try:
            victim.start()
            report.append("the victim restarted")
        except BookieProcessError as exc:
            message = exc.args[0].splitlines()[-1]  # the tail of its stderr: the last line is the reason
            report.append(f"the victim refused to start: {message}")
            assert "Traceback" not in str(exc), f"{report}: the refusal is a crash"
            assert "cannot start" in message and any(word in message for word in REFUSAL_WORDS), \
                f"{report}: the refusal does not say why"
        report.append(f"{time.monotonic() - started:.1f} s: restarted")

        # A: the other two bookies up
        reader = client()
        for ledger_id in closed_ids:
            read_exact_or_error(reader, ledger_id, CLOSED_ENTRIES - 1, must_succeed=True)

        # B: the other bookie holding the tail down too
        other.stop()
        degraded = client()
        for ledger_id in closed_ids:
            read_exact_or_error(degraded, ledger_id, CLOSED_ENTRIES - 1, must_succeed=False)
        closed = recover(degraded, writer.ledger_id, last_acked, report)
        report.append(f"recovery with {other.bookie_id} down: {'closed' if closed else 'failed'}")
        if closed:
            read_exact_or_error(degraded, writer.ledger_id, last_acked, must_succeed=False)

        report.append(f"{time.monotonic() - started:.1f} s: degraded phase done")
        # C: every bookie that can start is up
        other.start()
        spare.start()  # V may refuse to start, or refuse writes to a ledger whose index it found damaged
        final = client()
        wait_until(lambda: len(final.bookies()) >= 2, what="the bookies registered")
        deadline = time.monotonic() + 60  # a client reconnects to a restarted bookie after a back-off (part 8)
        while not closed and time.monotonic() < deadline:
            closed = recover(final, writer.ledger_id, last_acked, report)
            time.sleep(0 if closed else 1)
        assert closed, f"{report}: recovery failed with {other.bookie_id} up again"
        assert read_exact_or_error(final, writer.ledger_id, last_acked, must_succeed=True) == last_acked + 1
        for ledger_id in closed_ids:
            read_exact_or_error(final, ledger_id, CLOSED_ENTRIES - 1, must_succeed=True)
        report.append(f"{time.monotonic() - started:.1f} s: done")
        print("\n".join(report))
    except BaseException:
        print("\n".join(report))
        raise
    finally:
        if writer is not None:
            writer.kill()
        for opened in clients:
            opened.close()
        for bookie in [*cluster.bookies, spare]:
            if bookie.is_running():
                os.kill(bookie.pid, signal.SIGCONT)
            bookie.kill()
