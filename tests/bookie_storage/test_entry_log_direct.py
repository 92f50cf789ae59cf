"""The entry log written around the page cache (docs/protocol.md B9): whole blocks from the block holding the log's
end, one copy into an aligned buffer; a block holding bytes a sync covered is never written again (the next records
start at the next block, the zeros between are padding); every reader steps over padding; a file system without
direct I/O is written as before."""
from __future__ import annotations

import errno
import logging
import os
import random
import threading
import time

import pytest

from bookie_server import entry_log_direct
from bookie_server.config import parse_args
from bookie_server.entry_log import HEADER_SIZE, EntryLogger
from bookie_server.entry_log_direct import BLOCK, DirectWriter, open_direct, padding_end
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.replay_in_place import InPlaceMatcher
from bookie_server.storage import StorageConfig
from pyspark_ledger.errors import InvalidConfigurationError

MIB = 1024 * 1024


def batch(ledger_id: int, first: int, count: int, size: int) -> list[tuple[int, int, bytes]]:
    return [(ledger_id, entry_id, bytes([entry_id % 251 + 1]) * size) for entry_id in range(first, first + count)]


@pytest.fixture
def direct_dir(tmp_path):
    probe = tmp_path / "probe"
    probe.touch()
    fd = open_direct(probe)
    if fd is None:
        pytest.skip("the file system under the test's directory does not do O_DIRECT")
    os.close(fd)
    probe.unlink()
    return tmp_path


class Spy:
    """Records, in order, the direct writes (offset, length) made through ``entry_log_direct``."""

    def __init__(self, monkeypatch) -> None:
        self.writes: list[tuple[int, int]] = []
        real_pwritev = os.pwritev

        def pwritev(fd, views, offset):
            self.writes.append((offset, sum(len(view) for view in views)))
            return real_pwritev(fd, views, offset)

        monkeypatch.setattr(entry_log_direct.os, "pwritev", pwritev)

    def check_each_block_written_once(self) -> None:
        """The writes are whole blocks, each starting where the previous one ended: no block is written twice."""
        at = 0
        for offset, length in self.writes:
            assert offset % BLOCK == 0 and length % BLOCK == 0 and length > 0
            assert offset == at, f"a write at {offset}, after writes up to {at}: a block written twice, or a gap"
            at = offset + length


# --- the padding rule, a pure function ------------------------------------------------------------------------


def test_padding_is_zeros_from_an_unaligned_offset_to_the_next_block_or_the_end():
    data = bytearray(3 * BLOCK)
    data[:100] = b"x" * 100
    assert padding_end(data, 100, len(data)) == BLOCK  # zeros to the boundary
    assert padding_end(data, BLOCK - 1, len(data)) == BLOCK  # a single byte of padding
    assert padding_end(data, 0, len(data)) is None  # a record expected at a boundary is never padding
    assert padding_end(data, BLOCK, len(data)) is None
    assert padding_end(data, 100, 200) == 200  # the file ends inside the block
    assert padding_end(data, 200, 200) is None  # nothing left
    data[BLOCK - 1] = 1
    assert padding_end(data, 100, len(data)) is None  # one byte that is not zero: not padding
    data[BLOCK + 7:BLOCK + 11] = b"PLEL"
    assert padding_end(bytes(data), BLOCK + 3, len(data)) is None


def test_padding_at_every_offset_of_a_block():
    data = bytes(2 * BLOCK)
    for offset in range(1, BLOCK):
        assert padding_end(data, offset, len(data)) == BLOCK
        assert padding_end(data[:BLOCK + 5], BLOCK + offset % 5 + 1, BLOCK + 5) in (BLOCK + 5, None)


# --- DirectWriter on a real file ------------------------------------------------------------------------------


def open_writer(path, stage_bytes=entry_log_direct.STAGE_BYTES, buffers=None) -> DirectWriter:
    path.touch()
    writer = DirectWriter(stage_bytes, buffers)
    writer.begin(1, open_direct(path))
    return writer


def test_batches_of_every_size_are_staged_then_written_in_whole_blocks_byte_for_byte(direct_dir, monkeypatch):
    path = direct_dir / "1.log"
    writer = open_writer(path, stage_bytes=4 * BLOCK, buffers=3)  # small: batches fill several on the way
    spy = Spy(monkeypatch)
    rng = random.Random(7)
    expected = bytearray()
    try:
        sizes = [1, 27, BLOCK - 1, 1, BLOCK, 3 * BLOCK + 5, 9 * BLOCK, 0, 17]
        for size in sizes + [rng.randrange(1, 40_000) for _ in range(40)]:
            chunks = [os.urandom(part) for part in (size // 3, size - size // 3)]
            assert writer.append(chunks, size) == len(expected)  # no sync: each batch follows the last
            expected += b"".join(chunks)
            written = writer.written  # the thread may write more while the test reads the file: never less
            on_disk = path.read_bytes()
            assert written <= len(expected) < written + 3 * 4 * BLOCK  # at most the 3 buffers unwritten
            assert len(on_disk) >= written and on_disk[:written] == expected[:written]
            for offset in (0, written - 10, written, len(expected) - 30):
                offset = max(0, offset)
                length = min(60, len(expected) - offset)
                staged = writer.read_staged(1, offset, length)
                if staged is None:
                    assert offset + length <= writer.written
                else:
                    on_file, rest = staged
                    assert on_file <= length
                    assert path.read_bytes()[offset:offset + on_file] + rest == expected[offset:offset + length]
        assert writer.read_staged(2, len(expected) - 1, 1) is None  # another log: never staged here
        writer.flush(1)
        spy.check_each_block_written_once()
        assert max(length for _, length in spy.writes) <= 3 * 4 * BLOCK  # one write: what was queued
    finally:
        writer.release()
    data = path.read_bytes()
    assert len(data) % BLOCK == 0 and data[:len(expected)] == expected and not any(data[len(expected):])


def test_a_flush_writes_the_staged_bytes_padded_and_the_next_records_start_at_the_next_block(
        direct_dir, monkeypatch):
    path = direct_dir / "1.log"
    writer = open_writer(path)
    spy = Spy(monkeypatch)
    try:
        assert writer.append([b"a" * 100], 100) == 0
        assert path.stat().st_size == 0  # staged only
        writer.flush(2)  # another log: nothing written
        assert path.stat().st_size == 0
        writer.flush(1)
        assert writer.end == writer.written == BLOCK
        assert writer.append([b"b" * 50], 50) == BLOCK
        writer.flush(1)
        writer.flush(1)  # nothing staged: nothing written
        assert writer.append([b"c" * BLOCK], BLOCK) == 2 * BLOCK
        writer.flush(1)
        assert writer.end == 3 * BLOCK  # ended on a boundary: no padding
        data = path.read_bytes()
        assert data[:100] == b"a" * 100 and not any(data[100:BLOCK])
        assert data[BLOCK:BLOCK + 50] == b"b" * 50 and not any(data[BLOCK + 50:2 * BLOCK])
        assert data[2 * BLOCK:] == b"c" * BLOCK
        assert len(spy.writes) == 3
        spy.check_each_block_written_once()
        with pytest.raises(ValueError, match="announced"):
            writer.append([b"d"], 2)
    finally:
        writer.release()


def test_a_failed_write_of_the_thread_fails_the_next_append_and_every_flush(direct_dir, monkeypatch):
    path = direct_dir / "1.log"
    writer = open_writer(path, stage_bytes=BLOCK, buffers=2)
    real_pwritev = os.pwritev

    def failing(fd, views, offset):
        if offset >= BLOCK:
            raise OSError(errno.EIO, "injected")
        return real_pwritev(fd, views, offset)
    monkeypatch.setattr(entry_log_direct.os, "pwritev", failing)
    try:
        writer.append([b"a" * BLOCK], BLOCK)  # the thread writes block 0
        writer.append([b"b" * BLOCK], BLOCK)  # block 1: handed to the thread, which fails
        with pytest.raises(OSError, match="earlier direct write"):
            for _ in range(3):  # the failure is seen at the latest when a third buffer is needed
                writer.append([b"c" * BLOCK], BLOCK)
        with pytest.raises(OSError):
            writer.flush(1)
    finally:
        monkeypatch.undo()
        with pytest.raises(OSError):
            writer.release()
    assert path.read_bytes()[:BLOCK] == b"a" * BLOCK


def test_appends_and_reads_go_on_while_a_sync_writes(direct_dir, monkeypatch):
    """A sync's write holds the device, not the writer: appends fill another buffer and staged bytes are read
    meanwhile; the sync returns once its bytes are in the file, and the next sync writes what came meanwhile."""
    path = direct_dir / "1.log"
    writer = open_writer(path, stage_bytes=4 * BLOCK)
    real_pwritev = os.pwritev
    in_write, release = threading.Event(), threading.Event()

    def slow(fd, views, offset):
        if offset == 0:  # the sync's write of the first block
            in_write.set()
            assert release.wait(10)
        return real_pwritev(fd, views, offset)
    monkeypatch.setattr(entry_log_direct.os, "pwritev", slow)
    syncing = threading.Thread(target=writer.flush, args=(1,))
    try:
        assert writer.append([b"a" * 100], 100) == 0
        syncing.start()
        assert in_write.wait(10)
        assert writer.written == 0
        assert writer.append([b"b" * 200], 200) == BLOCK  # after the sync's padding, while it writes
        assert writer.read_staged(1, 0, 100) == (0, b"a" * 100)  # from the buffer being written
        assert writer.read_staged(1, BLOCK, 200) == (0, b"b" * 200)  # from the other one
        assert syncing.is_alive()  # still waiting for its write
        release.set()
        syncing.join(10)
        assert not syncing.is_alive() and writer.written == BLOCK
        assert path.read_bytes()[:100] == b"a" * 100
        writer.flush(1)
        assert writer.written == 2 * BLOCK and path.read_bytes()[BLOCK:BLOCK + 200] == b"b" * 200
    finally:
        release.set()
        syncing.join(10)
        writer.release()


def test_full_buffers_are_written_as_they_fill_and_those_queued_meanwhile_in_one_write(direct_dir, monkeypatch):
    """Each buffer goes to the thread when it fills, without a sync; while the device holds one write, the next
    full buffers queue up and leave together in the next write; an append waits only when all are queued."""
    path = direct_dir / "1.log"
    writer = open_writer(path, stage_bytes=BLOCK, buffers=4)
    spy = Spy(monkeypatch)
    recording = entry_log_direct.os.pwritev
    in_write, release = threading.Event(), threading.Event()

    def held(fd, views, offset):
        if offset == 0:
            in_write.set()
            assert release.wait(10)
        return recording(fd, views, offset)
    monkeypatch.setattr(entry_log_direct.os, "pwritev", held)

    def append_in_thread(data: bytes) -> threading.Thread:
        thread = threading.Thread(target=writer.append, args=([data], len(data)), daemon=True)
        thread.start()
        return thread
    try:
        writer.append([b"a" * BLOCK], BLOCK)  # fills buffer 1 of 4: handed over at once
        assert in_write.wait(10)
        filling = append_in_thread(b"b" * BLOCK + b"c" * BLOCK + b"d" * BLOCK)  # 3 more buffers, queued
        filling.join(10)
        assert not filling.is_alive()
        assert writer.written == 0 and writer.end == 4 * BLOCK
        waiting = append_in_thread(b"e" * 10)  # every buffer is queued: waits for one to come back
        waiting.join(0.2)
        assert waiting.is_alive()
        assert writer.read_staged(1, 2 * BLOCK, BLOCK) == (0, b"c" * BLOCK)  # from a queued buffer
        release.set()
        waiting.join(10)
        assert not waiting.is_alive()
        deadline = time.monotonic() + 10
        while writer.written < 4 * BLOCK and time.monotonic() < deadline:  # no sync: the thread writes them
            time.sleep(0.001)
        assert spy.writes == [(0, BLOCK), (BLOCK, 3 * BLOCK)]
        assert writer.read_staged(1, 4 * BLOCK, 10) == (0, b"e" * 10)
        writer.flush(1)
        assert spy.writes[2:] == [(4 * BLOCK, BLOCK)]
        assert path.read_bytes()[:4 * BLOCK + 10] == b"".join(c * BLOCK for c in (b"a", b"b", b"c", b"d")) + b"e" * 10
    finally:
        release.set()
        writer.release()


def test_a_write_the_kernel_cuts_short_is_resumed_where_it_stopped(direct_dir, monkeypatch):
    path = direct_dir / "1.log"
    writer = open_writer(path, stage_bytes=2 * BLOCK, buffers=4)
    real_pwritev = os.pwritev

    def one_block_a_call(fd, views, offset):  # as a kernel may: fewer bytes than asked, whole blocks
        return real_pwritev(fd, [memoryview(views[0])[:BLOCK]], offset)
    monkeypatch.setattr(entry_log_direct.os, "pwritev", one_block_a_call)
    data = os.urandom(7 * BLOCK + 100)
    try:
        assert writer.append([data], len(data)) == 0
        writer.flush(1)
    finally:
        writer.release()
    assert path.read_bytes()[:len(data)] == data


def test_a_failed_write_of_a_sync_fails_it_and_the_next_append(direct_dir, monkeypatch):
    path = direct_dir / "1.log"
    writer = open_writer(path)

    def failing(fd, views, offset):
        raise OSError(errno.EIO, "injected")
    monkeypatch.setattr(entry_log_direct.os, "pwritev", failing)
    try:
        writer.append([b"a" * 100], 100)
        with pytest.raises(OSError, match="injected"):
            writer.flush(1)
        with pytest.raises(OSError, match="earlier direct write"):
            writer.append([b"b" * 100], 100)
    finally:
        monkeypatch.undo()
        with pytest.raises(OSError):
            writer.release()


def test_the_buffer_size_must_be_whole_blocks_and_the_ring_at_least_two():
    for bad in (0, 100, BLOCK + 1):
        with pytest.raises(ValueError, match=str(BLOCK)):
            DirectWriter(bad)
    with pytest.raises(ValueError, match="at least 2 buffers"):
        DirectWriter(BLOCK, 1)


# --- the entry logger written directly, and every reader --------------------------------------------------------


def test_entry_logger_with_syncs_between_batches_reads_scans_and_replays_over_padding(direct_dir, monkeypatch):
    logger = EntryLogger(direct_dir, 1024 * MIB, preallocate_bytes=MIB, direct_io=True)
    assert logger.direct_io
    spy = Spy(monkeypatch)
    wanted, locations = [], []
    try:
        for round_ in range(12):
            entries = batch(1 + round_ % 3, round_ * 10, 1 + round_ % 4, size=100 + 997 * round_)
            locations += logger.append_batch(entries)
            wanted += entries
            if round_ % 2:
                logger.sync()
        assert [logger.read(location, ledger_id, entry_id)
                for location, (ledger_id, entry_id, _) in zip(locations, wanted)] == [data for *_, data in wanted]
        spy.check_each_block_written_once()
        paddings = sum(1 for (_, offset, length), (_, next_offset, _) in zip(locations, locations[1:])
                       if next_offset != offset + HEADER_SIZE + length)
        assert paddings >= 5  # the syncs left padding (one of them may have ended on a boundary)
    finally:
        logger.close()
    path, = direct_dir.glob("*.log")
    assert path.stat().st_size % BLOCK == 0
    (direct_dir / path.name.replace(".log", ".ledgers")).unlink()  # scanned, not read from the sealed map
    scan = EntryLogScan(path)
    assert [(record.ledger_id, record.entry_id, record.offset) for record in scan.records()] == \
        [(ledger_id, entry_id, offset) for (ledger_id, entry_id, _), (_, offset, _) in zip(wanted, locations)]
    assert scan.damage is None and scan.torn_bytes == 0
    matcher = InPlaceMatcher(direct_dir, (0, 0))
    try:
        assert [matcher.match(ledger_id, entry_id, data) for ledger_id, entry_id, data in wanted] == locations
    finally:
        matcher.close()


@pytest.mark.parametrize("stage_blocks, buffers", [(1, 2), (1, 16), (3, 3), (512, 16)])
def test_syncs_and_reads_racing_appends_never_write_a_block_twice_nor_read_a_wrong_byte(
        direct_dir, monkeypatch, stage_blocks, buffers):
    monkeypatch.setattr(entry_log_direct, "STAGE_BYTES", stage_blocks * BLOCK)  # buffers fill, syncs race hand-offs
    monkeypatch.setattr(entry_log_direct, "BUFFERS", buffers)  # 2: appends wait for free buffers
    logger = EntryLogger(direct_dir, 1024 * MIB, preallocate_bytes=0, direct_io=True)
    spy = Spy(monkeypatch)
    stop = threading.Event()
    failures: list[BaseException] = []
    wanted, locations = [], []

    def syncing():
        try:
            while not stop.is_set():
                logger.sync()
                time.sleep(0.0005)
        except BaseException as exc:  # noqa: BLE001 -- reported by the test below
            failures.append(exc)

    def reading():
        try:
            while not stop.is_set():
                for location, (_, entry_id, data) in list(zip(locations, wanted))[-20:]:
                    assert logger.read(location, 7, entry_id) == data
        except BaseException as exc:  # noqa: BLE001 -- reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=syncing), threading.Thread(target=reading)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    try:
        round_ = 0
        while (len(spy.writes) < 50 or round_ < 300) and time.monotonic() < deadline and not failures:
            entries = batch(7, round_ * 3, 3, size=50 + (round_ * 389) % 3000)
            new_locations = logger.append_batch(entries)
            wanted.extend(entries)  # the reader zips the two lists: extend the longer one last
            locations.extend(new_locations)
            round_ += 1
            time.sleep(0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    try:
        assert not failures
        spy.check_each_block_written_once()
        assert len(spy.writes) >= 50
        assert [logger.read(location, 7, entry_id)
                for location, (_, entry_id, _) in zip(locations, wanted)] == [data for *_, data in wanted]
    finally:
        logger.close()


def test_a_file_system_without_direct_io_is_written_as_before(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("bookie_server.entry_log.open_direct", lambda path: None)
    logger = EntryLogger(tmp_path, 1024 * MIB, direct_io=True)
    try:
        with caplog.at_level(logging.WARNING):
            locations = logger.append_batch(batch(1, 0, 3, size=1000))
        assert not logger.direct_io
        assert "O_DIRECT" in caplog.text
        path, = tmp_path.glob("*.log")
        end = locations[-1][1] + HEADER_SIZE + locations[-1][2]
        assert path.stat().st_size == end  # buffered: no zeros past the records
        assert logger.read(locations[1], 1, 1) == bytes([2]) * 1000
    finally:
        logger.close()


def test_direct_io_off_the_default_is_plain_buffered_appends(tmp_path):
    logger = EntryLogger(tmp_path, 1024 * MIB)
    try:
        locations = logger.append_batch(batch(1, 0, 3, size=1000))
        logger.sync()
        locations += logger.append_batch(batch(1, 3, 1, size=10))
        assert locations[3][1] == locations[2][1] + HEADER_SIZE + 1000  # no padding after a sync
        path, = tmp_path.glob("*.log")
        assert path.stat().st_size == locations[3][1] + HEADER_SIZE + 10
    finally:
        logger.close()


def test_the_flag_and_the_setting(tmp_path, open_storage):
    flags = ["--data-dir", str(tmp_path), "--port", "3181", "--metadata", "sqlite:///x.db"]
    assert parse_args(flags).storage_config().entry_log_direct_io is False
    assert parse_args(flags + ["--entry-log-direct-io"]).storage_config().entry_log_direct_io is True
    with pytest.raises(InvalidConfigurationError, match="entry_log_direct_io"):
        StorageConfig(tmp_path, entry_log_direct_io="yes")
    assert open_storage()._entry_log.direct_io is False
    assert open_storage(tmp_path / "direct", entry_log_direct_io=True)._entry_log.direct_io is True
