"""Issue 12 part 4: a bookie whose storage fails stops looking writable at once, keeps serving reads, comes
back when the cause is gone; a bookie whose disk is full still starts, read-only, and serves reads.

Real processes on a real full file system: a small tmpfs the test mounts (and unmounts, also on failure;
skipped where mounting is not allowed). The disk monitor is off for the bookie on it, so only the storage
failure path can turn it read-only. The pure rules of ``storage_watch`` are tested exhaustively below."""
from __future__ import annotations

import errno
import itertools
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bookie_server.journal import FAULT_FSYNC_ENV
from bookie_server.storage_watch import (DISK_FULL, IO_FAILURE, OPERATOR, REOPEN, WAIT, StorageWatch,
                                         failure_cause, next_step)
from pyspark_ledger.client import BookieClient, BookieStatus, LedgerClient
from pyspark_ledger.errors import StorageError
from pyspark_ledger.testing.bookies import BookieProcess

from .conftest import KEY, entry, wait_until

DISK_BYTES = 8 * 1024 * 1024
BODY = b"x" * 16_000
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class BookieOnDisk(BookieProcess):
    """A bookie whose data dir is ``disk`` (its logs stay in ``home``, off the disk that fills up)."""

    def __init__(self, home: Path, disk: Path, metadata_uri: str, **flags) -> None:
        super().__init__(home, metadata_uri, **flags)
        self.disk = disk

    def args(self) -> list[str]:
        args = super().args()
        args[args.index("--data-dir") + 1] = str(self.disk)
        return args


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root and mount): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill the disk with a filler file until ``leave`` bytes are free (0: until ENOSPC)."""
    filler = disk / "filler"
    with open(filler, "ab") as out:
        while True:
            free = shutil.disk_usage(disk).free
            if free <= leave:
                return filler
            try:
                out.write(b"\0" * min(64 * 1024, free - leave))
                out.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return filler


def health(bookie: BookieProcess) -> int:
    with grpc.insecure_channel(bookie.address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="pyspark_ledger.wire.v1.Bookie"), timeout=10).status


def read_only_in(store, bookie: BookieProcess) -> bool:
    return store.bookies()[bookie.bookie_id].read_only


def add_until_refused(client: BookieClient, ledger_id: int, limit: int = 2000) -> tuple[list[int], BookieStatus]:
    """Add entries one by one until one is refused; the acknowledged ids and the refusal's status."""
    acked = []
    with client.add_stream() as stream:
        for entry_id in range(limit):
            result = stream.add(ledger_id, entry_id, KEY, entry(ledger_id, entry_id, BODY)).result(30)
            if not result.ok:
                return acked, result.status
            acked.append(entry_id)
    raise AssertionError(f"{limit} adds of {len(BODY)} bytes never filled the disk")


def assert_reads(client: BookieClient, ledger_id: int, acked: list[int]) -> None:
    for entry_id in acked:
        reply = client.read(ledger_id, entry_id, master_key=KEY)
        assert reply.ok and reply.entries == ((entry_id, entry(ledger_id, entry_id, BODY)),), (entry_id, reply)


def test_a_full_disk_turns_the_bookie_read_only_at_once_and_back_and_it_starts_full(
        tmp_path, small_disk, metadata_uri, metadata_store, make_bookie):
    # journal_preallocate_bytes=0: a killed journal's preallocated zeros, cut by replay, would give the replay the
    # room this test takes away (it checks the disk reserve's release when a replay finds no room at all)
    flags = dict(checkpoint_interval=3600, disk_check_interval=0, disk_usage_lwm=0.5, disk_reserve=1024 * 1024,
                 journal_preallocate_bytes=0)
    full = BookieOnDisk(tmp_path / "full-home", small_disk, metadata_uri, **flags)
    others = [make_bookie(f"ok{index}", no_verify_new_ledgers=False) for index in range(3)]
    try:
        full.start()
        for bookie in others:
            bookie.start()
        assert read_only_in(metadata_store, full) is False and health(full) == SERVING
        assert (small_disk / "RESERVED_SPACE").stat().st_size == 1024 * 1024
        client = BookieClient(full.bookie_id, timeout=30.0)
        ledgers = LedgerClient(metadata_uri)
        try:
            filler = fill(small_disk, leave=1024 * 1024)
            ledger = ledgers.create_ledger(1, password=b"secret")  # metadata for the raw adds below (KEY)
            ledger_id = ledger.ledger_id
            first = ledgers.create_ledger(4, 4, 2, password=b"p")  # written after the recovery below

            acked, refusal = add_until_refused(client, ledger_id)
            assert refusal == BookieStatus.IO_ERROR and acked
            # at once: the disk monitor is off, only the storage failure can tell
            wait_until(lambda: read_only_in(metadata_store, full), 10, "the registration to turn read-only")
            assert health(full) == NOT_SERVING and client.info().read_only
            assert_reads(client, ledger_id, acked)
            # the client learns registrations through its watch: wait for it, then place
            wait_until(lambda: full.bookie_id not in ledgers.bookies(writable_only=True), 10, "the client to see it")
            placed = [ledgers.create_ledger(3, password=b"p") for _ in range(20)]
            assert all(full.bookie_id not in w.metadata.current_fragment.bookies for w in placed), "placed on it"
            for writer in placed:
                writer.close()

            filler.unlink()  # space is back below the low-water mark: the storage is reopened
            wait_until(lambda: not read_only_in(metadata_store, full), 60, "the bookie to take adds again")
            assert health(full) == SERVING and not client.info().read_only
            assert_reads(client, ledger_id, acked)
            for index in range(5):
                first.append(b"after recovery %d" % index)
            assert full.bookie_id in first.metadata.current_fragment.bookies

            # a disk that fills up again, then a kill -9: the journal must be replayed into a full disk
            fill(small_disk)
            full.kill()
            full.start()
            assert "released the" in (full.data_dir / "bookie-stderr.log").read_text()
            assert read_only_in(metadata_store, full) and health(full) == NOT_SERVING
            client.close()
            client = BookieClient(full.bookie_id, timeout=30.0)
            assert_reads(client, ledger_id, acked)
            with ledgers.open_ledger(first.ledger_id, b"p", recovery=False) as reader:
                # entry 4 is readable once the writer's explicit LAC (advisory, 0.1 s after its last add) reached
                # the bookies; under load it can land after this open
                wait_until(lambda: reader.read_last_add_confirmed() >= 4, 15, "the explicit LAC of entry 4")
                assert [e.data for e in reader.read(0, 4)] == [b"after recovery %d" % i for i in range(5)]
        finally:
            client.close()
            ledgers.close()
    finally:
        full.kill()
        for bookie in others:
            bookie.kill()


def test_a_failed_fsync_turns_the_bookie_read_only_at_once_until_an_operator_restarts_it(
        tmp_path, metadata_uri, metadata_store, make_bookie):
    # a real process whose journal fsync fails with EIO after 20 group commits (FAULT_FSYNC_ENV: there is no
    # failing block device here); the disk monitor is off, so only the storage failure can tell
    flags = dict(checkpoint_interval=3600, disk_check_interval=0)
    failing = make_bookie("failing", env={FAULT_FSYNC_ENV: "20"}, **flags).start()
    others = [make_bookie(f"ok{index}", no_verify_new_ledgers=False) for index in range(3)]
    for bookie in others:
        bookie.start()
    client = BookieClient(failing.bookie_id, timeout=30.0)
    ledgers = LedgerClient(metadata_uri)
    try:
        acked, refusal = add_until_refused(client, 7, limit=200)
        assert refusal == BookieStatus.IO_ERROR and len(acked) == 20
        wait_until(lambda: read_only_in(metadata_store, failing), 10, "the registration to turn read-only")
        assert health(failing) == NOT_SERVING and client.info().read_only
        assert_reads(client, 7, acked)
        wait_until(lambda: failing.bookie_id not in ledgers.bookies(writable_only=True), 10, "the client to see it")
        placed = [ledgers.create_ledger(3, password=b"p") for _ in range(10)]
        assert all(failing.bookie_id not in w.metadata.current_fragment.bookies for w in placed), "placed on it"
        for writer in placed:
            writer.close()
        stderr = failing.data_dir / "bookie-stderr.log"
        wait_until(lambda: "until it is restarted" in stderr.read_text(), 10, "the log to say a restart is needed")
        assert read_only_in(metadata_store, failing) and health(failing) == NOT_SERVING  # no way back on its own

        failing.stop()
        failing.env.pop(FAULT_FSYNC_ENV)
        failing.start()  # the operator checked the disk and restarted it: the journal is replayed
        client.close()
        client = BookieClient(failing.bookie_id, timeout=30.0)
        wait_until(lambda: not read_only_in(metadata_store, failing), 10, "the bookie to be writable again")
        assert health(failing) == SERVING
        assert_reads(client, 7, acked)
    finally:
        client.close()
        ledgers.close()


# --- the rules -------------------------------------------------------------------------------------


def storage_error(errno_value: int) -> StorageError:
    error = StorageError("journal write/fsync failed")
    error.__cause__ = OSError(errno_value, "boom")
    return error


@pytest.mark.parametrize("exc, cause", [
    (storage_error(errno.ENOSPC), DISK_FULL), (storage_error(errno.EDQUOT), DISK_FULL),
    (storage_error(errno.EIO), IO_FAILURE), (StorageError("checkpoint failed"), IO_FAILURE),
    (OSError(errno.ENOSPC, "full"), DISK_FULL), (None, IO_FAILURE),
])
def test_failure_cause(exc, cause):
    assert failure_cause(exc) == cause


def test_next_step_reopens_only_a_full_disk_below_the_low_water_mark():
    for cause, used in itertools.product([DISK_FULL, IO_FAILURE], [None, 0.0, 0.49, 0.5, 0.9, 1.0]):
        expected = OPERATOR if cause == IO_FAILURE else WAIT if used is None or used >= 0.5 else REOPEN
        assert next_step(cause, used, 0.5) == expected, (cause, used)


class FakeStorage:
    def __init__(self) -> None:
        self.failure = None


def test_the_watch_reports_a_failure_once_reopens_when_space_is_back_and_never_after_an_io_error():
    storage, changes, usage, reopened = FakeStorage(), [], [0.99], []

    def reopen():
        reopened.append(True)
        storage.failure = None

    watch = StorageWatch(storage, [Path("/")], 0.5, changes.append, reopen, measure=lambda _: usage[0])
    watch.check()
    assert changes == [] and not watch.failed
    storage.failure = storage_error(errno.ENOSPC)
    watch.check(), watch.check()
    assert len(changes) == 1 and "disk is full" in changes[0] and reopened == []
    usage[0] = 0.3
    watch.check()
    assert reopened == [True] and changes[-1] is None and not watch.failed
    storage.failure = storage_error(errno.EIO)
    for _ in range(3):
        watch.check()
    assert len(changes) == 3 and "restart" in changes[-1] and reopened == [True]


def test_a_verdict_the_server_could_not_apply_is_retried():
    storage, applied, broken = FakeStorage(), [], [True]

    def on_change(reason):
        if broken[0]:
            raise RuntimeError("metadata store unreachable")
        applied.append(reason)

    watch = StorageWatch(storage, [Path("/")], 0.5, on_change, lambda: setattr(storage, "failure", None),
                         measure=lambda _: 0.9)
    storage.failure = storage_error(errno.ENOSPC)
    watch.check()
    assert applied == []
    broken[0] = False
    watch.check()
    assert len(applied) == 1 and applied[0] is not None
    broken[0] = True
    watch._measure = lambda _: 0.1
    watch.check()  # reopened, but telling the server failed
    assert len(applied) == 1 and not watch.failed
    broken[0] = False
    watch.check()
    assert applied[-1] is None
