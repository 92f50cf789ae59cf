"""Journal format versions: the torn-or-damaged verdict (exhaustively), version 1 files replay as before,
version 2 group framing, and a file from a newer version is refused."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from bookie_server.journal import journal_path
from bookie_server.journal_format import (FILE_HEADER, VERSION, _encode_small, encode_commit, encode_fence,
                                          encode_file_header, encode_ledger_key, file_version, parse_record)
from bookie_server.journal_replay import DAMAGE, NO_MARK, TORN, damage_verdict, replay_journal
from pyspark_ledger.errors import JournalCorruptError, StorageError

KEY = b"k" * 32


@pytest.mark.parametrize("version,newest,valid_after,commit_after",
                         list(itertools.product((1, 2), (False, True), (False, True), (False, True))))
def test_damage_verdict(version, newest, valid_after, commit_after):
    verdict = damage_verdict(version, newest, valid_after, commit_after)
    if not newest:
        expected = DAMAGE  # older files end with a complete, fsync'd group
    elif version == 1:
        expected = DAMAGE if valid_after else TORN  # the historical rule
    else:
        expected = DAMAGE if commit_after else TORN  # a later COMMIT proves the record was acknowledged
    assert verdict == expected


def records(count: int, first_ledger: int = 1) -> list[bytes]:
    return [encode_ledger_key(first_ledger + n, KEY) for n in range(count)]


def write(directory: Path, file_id: int, parts: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = journal_path(directory, file_id)
    path.write_bytes(b"".join(parts))
    return path


def group(parts: list[bytes]) -> list[bytes]:
    return parts + [encode_commit(len(parts), sum(map(len, parts)))]


def replay(directory: Path, skip: bool = False):
    applied = []
    result = replay_journal(directory, NO_MARK, skip, applied.append)
    return result, [record.ledger_id for record in applied]


def test_file_versions(tmp_path):
    v1 = b"".join(records(3))
    assert file_version(v1, len(v1)) == 1
    v2 = encode_file_header() + b"".join(group(records(3)))
    assert file_version(v2, len(v2)) == VERSION
    damaged_header = b"\0" * 10 + v2[10:]  # the header is gone, a COMMIT record says version 2
    assert file_version(damaged_header, len(damaged_header)) == VERSION
    header = parse_record(v2, 0, len(v2))
    assert header.kind == FILE_HEADER and header.entry_id == VERSION


def test_version_1_file_replays_as_before(tmp_path):
    parts = records(4)
    path = write(tmp_path, 1, parts)
    result, applied = replay(tmp_path)
    assert applied == [1, 2, 3, 4] and result.truncated_bytes == 0
    # version 1: a checksum-bad last record with nothing valid after it is taken for a torn write
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    result, applied = replay(tmp_path)
    assert applied == [1, 2, 3] and path.stat().st_size == sum(map(len, parts[:3]))
    # ...but a bad record with valid ones after it is corruption
    data = bytearray(path.read_bytes())
    data[len(parts[0]) + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match=f"{path}.*offset {len(parts[0])}"):
        replay(tmp_path)


def test_version_2_torn_group_without_commit_is_truncated(tmp_path):
    first, second = group(records(2)), records(3, first_ledger=10)  # the second group's write did not finish
    prefix = encode_file_header() + b"".join(first)
    data = bytearray(prefix + b"".join(second))
    data[len(prefix) + 20] ^= 0xFF  # its first record is bad, its other records are whole: still torn
    path = write(tmp_path, 1, [bytes(data)])
    result, applied = replay(tmp_path)
    assert applied == [1, 2] and path.stat().st_size == len(prefix) and result.truncated_bytes > 0


@pytest.mark.parametrize("in_group", ["last", "earlier"])
def test_version_2_bad_record_before_a_commit_is_damage(tmp_path, in_group):
    first, second = group(records(2)), group(records(2, first_ledger=10))
    header = encode_file_header()
    data = bytearray(header + b"".join(first) + b"".join(second))
    bad = len(header) + (len(first[0]) if in_group == "earlier" else len(b"".join(first)) + len(second[0]))
    data[bad + 20] ^= 0xFF
    path = write(tmp_path, 1, [bytes(data)])
    with pytest.raises(JournalCorruptError, match=f"{path} is corrupt at offset {bad}.*group commit record"):
        replay(tmp_path)
    assert path.stat().st_size == len(data)
    result, applied = replay(tmp_path, skip=True)
    assert result.skipped_regions == 1 and len(applied) == 3


def test_version_2_damaged_commit_of_the_last_group_keeps_its_records(tmp_path):
    parts = group(records(3))
    data = bytearray(encode_file_header() + b"".join(parts))
    data[-5] ^= 0xFF
    path = write(tmp_path, 1, [bytes(data)])
    result, applied = replay(tmp_path)
    assert applied == [1, 2, 3] and path.stat().st_size == len(data) - len(parts[-1])


def test_a_file_of_a_newer_version_is_refused(tmp_path):
    write(tmp_path, 1, [_encode_small(FILE_HEADER, (VERSION + 1).to_bytes(2, "big"))] + group(records(1)))
    with pytest.raises(StorageError, match=f"format version {VERSION + 1}"):
        replay(tmp_path)


def test_an_older_file_ending_without_commit_is_damage(tmp_path):
    write(tmp_path, 1, [encode_file_header()] + records(2))  # an older file always ends with a COMMIT...
    data = bytearray(journal_path(tmp_path, 1).read_bytes())
    data[-3] ^= 0xFF
    journal_path(tmp_path, 1).write_bytes(bytes(data))
    write(tmp_path, 2, [encode_file_header()] + group([encode_fence(5, KEY)]))
    with pytest.raises(JournalCorruptError, match="not the newest"):
        replay(tmp_path)
