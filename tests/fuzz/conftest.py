"""The fuzz suite's target: one real bookie process with data written before the fuzzing, and the checks
that must hold after it.

Each test gets a fresh bookie (SQLite metadata, checkpoints every second) holding a few seed ledgers written
with ``LedgerClient`` (E = Qw = Qa = 1). ``FuzzTarget.probe()`` is the cheap check run after every input:
the process is alive, its gRPC health is SERVING, Info answers OK, and its RSS stays under the bound.
``FuzzTarget.full_check()`` runs at the end of a test (and every ``FULL_CHECK_EVERY`` inputs): the probe, the
seed ledgers read back byte for byte, and new ledgers written before, between and after two checkpoints (the
test waits for the checkpoint mark file to change), all read back. ``restart_check()`` stops
the bookie, starts it again on the same data dir, and checks the same.

Budget: ``LEDGER_FUZZ_EXAMPLES=N`` runs N inputs of each kind (default: the CI budget of each test, about two
minutes in all); ``LEDGER_FUZZ_SEED=S`` fixes hypothesis' seed (default: derandomized, i.e. the same inputs
on every run; a long run with ``LEDGER_FUZZ_SEED=random`` draws a seed and prints it).
``LEDGER_FUZZ_SUMMARY=path.json`` writes the summary of the session (inputs tried per kind, crashes, hangs,
peak RSS, data lost, every failure with the input that preceded it) for the README's reliability table.
``LEDGER_FUZZ_RSS_MARGIN_MIB`` changes the memory bound (default: baseline + 256 MiB).
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.entry import master_key
from pyspark_ledger.testing.bookies import BookieProcess
from pyspark_ledger.testing.wire_fuzz import RawBookie, rss_bytes
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

MiB = 1024 * 1024
CHECKPOINT_INTERVAL_S = 1.0
CHECKPOINT_WAIT_S = 20.0
PROBE_TIMEOUT_S = 5.0
RSS_MARGIN = int(float(os.environ.get("LEDGER_FUZZ_RSS_MARGIN_MIB", "256")) * MiB)
FULL_CHECK_EVERY = 200
RSS_SAMPLE_S = 0.05
SEED_PASSWORD = b"seed password"
SEED_KEY = master_key(SEED_PASSWORD)
SEED_LEDGERS = 3
#: payload sizes of a seed ledger's entries (empty, tiny, 1 KiB, 100 KiB)
SEED_SIZES = (0, 1, 17, 1024, 100 * 1024, 3, 4096)
CLIENT_CONFIG = ClientConfig(add_timeout_s=10.0, read_timeout_s=10.0, close_timeout_s=20.0,
                             recovery_timeout_s=30.0)


def examples(default: int) -> int:
    """Inputs per kind: ``LEDGER_FUZZ_EXAMPLES`` if set, else this test's CI default."""
    return int(os.environ.get("LEDGER_FUZZ_EXAMPLES", default))


def fuzz_seed() -> int | None:
    """None = derandomized (CI); a number = that seed; 'random' = a fresh seed (printed)."""
    value = os.environ.get("LEDGER_FUZZ_SEED", "")
    if not value:
        return None
    seed = random.SystemRandom().randrange(2**32) if value == "random" else int(value)
    print(f"hypothesis seed {seed} (LEDGER_FUZZ_SEED={seed} repeats this run)")
    return seed


# --- the session summary --------------------------------------------------------------------
@dataclass
class Summary:
    """What the whole fuzz session saw; written as JSON at the end of the session."""

    inputs: Counter = field(default_factory=Counter)            # kind -> inputs sent
    statuses: dict = field(default_factory=dict)                # kind -> {status or gRPC code: count}
    failures: list = field(default_factory=list)                # one dict per failure
    peak_rss: int = 0
    baseline_rss: int = 0
    rss_bound: int = 0
    started: float = field(default_factory=time.monotonic)

    def sent(self, kind: str) -> None:
        self.inputs[kind] += 1

    def count(self, kind: str, outcome: str) -> None:
        bucket = self.statuses.setdefault(kind, Counter())
        bucket[outcome] += 1

    def fail(self, kind: str, what: str, detail: str, last_inputs: list[str], accepted: list[str] | None = None
             ) -> dict:
        failure = {"kind": kind, "what": what, "detail": detail, "last_inputs": last_inputs[-5:],
                   "last_accepted_adds": list(accepted or [])}
        self.failures.append(failure)
        return failure

    def as_json(self) -> dict:
        by_what = Counter(failure["what"] for failure in self.failures)
        return {
            "inputs_total": sum(self.inputs.values()),
            "inputs_per_kind": dict(self.inputs),
            "outcomes_per_kind": {kind: dict(counts) for kind, counts in self.statuses.items()},
            "crashes": by_what["crash"] + by_what["restart failed"],
            "hangs": by_what["hang"] + by_what["unresponsive"],
            "memory_over_bound": by_what["rss over bound"],
            "data_lost": by_what["data lost"],
            "writes_refused_after": by_what["new write failed"] + by_what["checkpoint stuck"],
            "peak_rss_bytes": self.peak_rss,
            "baseline_rss_bytes": self.baseline_rss,
            "rss_bound_bytes": self.rss_bound,
            "failures": self.failures,
            "duration_s": round(time.monotonic() - self.started, 1),
        }


_SUMMARY = Summary()


@pytest.fixture(scope="session")
def summary():
    yield _SUMMARY
    path = os.environ.get("LEDGER_FUZZ_SUMMARY")
    if path:
        Path(path).write_text(json.dumps(_SUMMARY.as_json(), indent=2, default=str) + "\n")


# --- the target ------------------------------------------------------------------------------
class FuzzTarget:
    """A real bookie with seed data, and the checks of the module docstring. Failures are recorded in the
    summary and in ``self.failures``; the tests assert on that list once the inputs are spent."""

    def __init__(self, bookie: BookieProcess, metadata_uri: str, summary: Summary, kind: str) -> None:
        self.bookie = bookie
        self.metadata_uri = metadata_uri
        self.summary = summary
        self.kind = kind
        self.raw = RawBookie(bookie.address)
        self.seed: dict[int, list[bytes]] = {}
        self.failures: list[dict] = []
        self.recent: list[str] = []    # the last inputs sent, for the report of a failure
        self.accepted: list[str] = []  # the last adds answered OK
        self.baseline_rss = 0
        self.peak_rss = 0
        self.broken = False          # the bookie died or stopped answering: later inputs are not sent
        self.sent = 0
        self._fresh = 0
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    # --- memory ----------------------------------------------------------------------
    def _sample_rss(self) -> None:
        while not self._sampling.wait(RSS_SAMPLE_S):
            pid = self.bookie.pid
            if pid is not None:
                self.note_rss(rss_bytes(pid))

    def note_rss(self, rss: int) -> None:
        self.peak_rss = max(self.peak_rss, rss)
        self.summary.peak_rss = max(self.summary.peak_rss, rss)

    def start_sampling(self) -> None:
        """Sample the bookie's RSS every RSS_SAMPLE_S in the background (the peak, not just the probes)."""
        self._sampler = threading.Thread(target=self._sample_rss, name="rss-sampler", daemon=True)
        self._sampler.start()

    @property
    def rss_bound(self) -> int:
        return self.baseline_rss + RSS_MARGIN

    def seed_keys(self) -> dict[int, bytes]:
        return {ledger_id: SEED_KEY for ledger_id in self.seed}

    # --- setup ---------------------------------------------------------------------
    def write_seed(self) -> None:
        with LedgerClient(self.metadata_uri, CLIENT_CONFIG) as ledgers:
            for index in range(SEED_LEDGERS):
                writer = ledgers.create_ledger(1, 1, 1, password=SEED_PASSWORD)
                payloads = [bytes([index + 1]) * size + f"seed {index}/{n}".encode()
                            for n, size in enumerate(SEED_SIZES)]
                for payload in payloads:
                    writer.append(payload)
                writer.close()
                self.seed[writer.ledger_id] = payloads
        self.baseline_rss = rss_bytes(self.bookie.pid)
        self.peak_rss = self.baseline_rss
        self.summary.baseline_rss = max(self.summary.baseline_rss, self.baseline_rss)
        self.summary.rss_bound = max(self.summary.rss_bound, self.rss_bound)

    # --- recording -------------------------------------------------------------------
    def note_input(self, text: str) -> None:
        """An input is about to be sent (``text`` describes it)."""
        self.sent += 1
        self.summary.sent(self.kind)
        self.recent.append(text)
        del self.recent[:-8]

    def note_accepted(self, text: str) -> None:
        """An add was answered OK: kept, since a poisoned add only shows at the next checkpoint."""
        self.accepted.append(text)
        del self.accepted[:-10]

    def fail(self, what: str, detail: str) -> None:
        self.failures.append(self.summary.fail(self.kind, what, detail, list(self.recent), list(self.accepted)))

    def count(self, outcome: str) -> None:
        self.summary.count(self.kind, outcome)

    # --- checks ----------------------------------------------------------------------
    def probe(self) -> bool:
        """Alive, SERVING, Info OK, RSS under the bound. Records the first failure and marks the target broken."""
        if self.broken:
            return False
        if not self.bookie.is_running():
            self.broken = True
            self.fail("crash", f"the bookie exited with status {self.bookie.returncode}: "
                      f"{self.bookie.stderr_tail(8)}")
            return False
        self.note_rss(rss_bytes(self.bookie.pid))
        try:
            health = self.raw.health(PROBE_TIMEOUT_S)
            info = self.raw.info(PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            self.broken = True
            self.fail("unresponsive", f"health/Info did not answer within {PROBE_TIMEOUT_S:.0f} s: "
                      f"{exc.code().name} {exc.details()}")
            return False
        if health != "SERVING":
            self.broken = True
            self.fail("not serving", f"health is {health}")
            return False
        if info.status != pb.OK:
            self.broken = True
            self.fail("not serving", f"Info answered {pb.Status.Name(info.status)}")
            return False
        if self.peak_rss > self.rss_bound:
            self.broken = True
            self.fail("rss over bound", f"peak RSS {self.peak_rss / MiB:.0f} MiB > bound "
                      f"{self.rss_bound / MiB:.0f} MiB (baseline {self.baseline_rss / MiB:.0f} MiB + "
                      f"{RSS_MARGIN / MiB:.0f} MiB); "
                      f"{rss_bytes(self.bookie.pid) / MiB:.0f} MiB now")
            return False
        return True

    def check_seed(self, client: LedgerClient) -> bool:
        for ledger_id, payloads in self.seed.items():
            try:
                with client.open_ledger(ledger_id, SEED_PASSWORD) as reader:
                    got = [bytes(entry.data) for entry in reader.read(0, len(payloads) - 1)]
            except Exception as exc:  # noqa: BLE001 - any failure to read acknowledged data is the finding
                self.fail("data lost", f"seed ledger {ledger_id} cannot be read: {type(exc).__name__}: {exc}")
                return False
            if got != payloads:
                self.fail("data lost", f"seed ledger {ledger_id} reads back {len(got)} entries that differ from "
                          f"the {len(payloads)} written")
                return False
        return True

    def _mark_mtime(self) -> int:
        try:
            return (self.bookie.data_dir / "lastmark").stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def _write_ledger(self, client: LedgerClient, label: str) -> tuple[int, list[bytes]]:
        writer = client.create_ledger(1, 1, 1, password=b"fresh")
        payloads = [f"fresh {self._fresh} {label} {n} ".encode() * (n + 1) for n in range(5)]
        for payload in payloads:
            writer.append(payload)
        writer.close()
        return writer.ledger_id, payloads

    def _wait_for_checkpoint(self, before: int, deadline: float) -> bool:
        while self._mark_mtime() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._mark_mtime() != before

    def check_writes(self, client: LedgerClient) -> bool:
        """New ledgers are written before, between and after two checkpoints, and read back.

        A checkpoint that was running during the first write may not cover it, but the one that moves the mark
        after the second write started after the first checkpoint ended, so it covers both (a checkpoint with
        nothing new does not move the mark, hence a write between the two)."""
        self._fresh += 1
        written: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + CHECKPOINT_WAIT_S
        for phase in ("before a checkpoint", "between checkpoints", "after a checkpoint"):
            before = self._mark_mtime()
            try:
                ledger_id, payloads = self._write_ledger(client, phase)
            except Exception as exc:  # noqa: BLE001 - any failure to write is the finding
                self.fail("new write failed", f"a new ledger could not be written {phase}: "
                          f"{type(exc).__name__}: {exc}")
                return False
            written[ledger_id] = payloads
            if phase != "after a checkpoint" and not self._wait_for_checkpoint(before, deadline):
                self.fail("checkpoint stuck", f"no checkpoint covered a write within {CHECKPOINT_WAIT_S:.0f} s "
                          f"(interval {CHECKPOINT_INTERVAL_S} s): {self.bookie.stderr_tail(5)}")
                return False
        for ledger_id, payloads in written.items():
            try:
                with client.open_ledger(ledger_id, b"fresh") as reader:
                    got = [bytes(entry.data) for entry in reader.read(0, len(payloads) - 1)]
            except Exception as exc:  # noqa: BLE001
                self.fail("data lost", f"new ledger {ledger_id} cannot be read: {type(exc).__name__}: {exc}")
                return False
            if got != payloads:
                self.fail("data lost", f"new ledger {ledger_id} reads back other bytes")
                return False
        return True

    def full_check(self) -> bool:
        if not self.probe():
            return False
        with LedgerClient(self.metadata_uri, CLIENT_CONFIG) as client:
            ok = self.check_seed(client) and self.check_writes(client)
        return self.probe() and ok

    def restart_check(self) -> bool:
        """Stop the bookie (SIGTERM), start it again on its data dir; then the full check."""
        self.raw.close()
        self.bookie.stop()
        try:
            self.bookie.start()
        except Exception as exc:  # noqa: BLE001
            self.broken = True
            self.fail("restart failed", f"the bookie does not start again: {exc}")
            return False
        self.raw = RawBookie(self.bookie.address)
        self.broken = False
        self.peak_rss = rss_bytes(self.bookie.pid)  # the bound applies to the new process from here on
        time.sleep(0.5)  # a fresh channel right after a restart may still be in its reconnect back-off
        return self.full_check()

    def finish(self) -> list[dict]:
        """The end of a run: full check, then restart and check again (even after a failure: restarting is
        what an operator would do). Returns the failures."""
        if not self.broken:
            self.full_check()
        if self.bookie.is_running() or self.bookie.returncode is not None:
            self.restart_check()
        return self.failures

    def close(self) -> None:
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join()
        self.raw.close()


def report(failures: list[dict]) -> str:
    lines = []
    for failure in failures:
        lines.append(f"- {failure['what']}: {failure['detail']}")
        for text in failure["last_inputs"]:
            lines.append(f"    after: {text}")
        for text in failure["last_accepted_adds"]:
            lines.append(f"    after an add answered OK: {text}")
    return "\n".join(lines)


@pytest.fixture
def target(request, tmp_path, summary):
    """A fresh bookie with seed data for one fuzz test (see the module docstring); stopped at teardown.

    Parametrized indirectly with "unguarded", the bookie runs with --no-verify-new-ledgers: adds to ledgers
    without metadata then reach storage with their hostile ids, sizes and keys instead of being refused
    NO_SUCH_LEDGER by the ledger guard (an operator may turn it off; storage must hold either way). With "framed"
    it also takes adds on a framed add port (``--add-port 0``, docs/protocol.md W11)."""
    metadata_uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5&poll_interval=0.1"
    mode = getattr(request, "param", "guarded")
    flags = {"no_verify_new_ledgers": True} if mode == "unguarded" else {"add_port": 0} if mode == "framed" else {}
    bookie = BookieProcess(tmp_path / "bookie", metadata_uri, checkpoint_interval=CHECKPOINT_INTERVAL_S, **flags)
    fuzz_target = FuzzTarget(bookie, metadata_uri, summary, request.node.name.removeprefix("test_"))
    try:
        bookie.start()
        fuzz_target.write_seed()
        fuzz_target.start_sampling()
        yield fuzz_target
    finally:
        fuzz_target.close()
        bookie.kill()
