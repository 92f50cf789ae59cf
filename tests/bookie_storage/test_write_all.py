"""files.write_all: every chunk written in order, with one writev for up to IOV_MAX chunks and resumed after a
short write, so that a partial write is never taken for a whole one."""
from __future__ import annotations

import os

import pytest

from bookie_server import files
from bookie_server.files import IOV_MAX, write_all


@pytest.fixture
def fd(tmp_path):
    opened = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT, 0o600)
    yield opened
    os.close(opened)


def contents(fd: int) -> bytes:
    return os.pread(fd, 1 << 24, 0)


def chunks(count: int) -> list:
    return [bytes([index % 251]) * (1 + index % 7) for index in range(count)]


@pytest.mark.parametrize("count", [0, 1, 2, IOV_MAX, IOV_MAX + 1, 2 * IOV_MAX + 3])
def test_every_chunk_is_written_in_order(fd, count, monkeypatch) -> None:
    calls = []
    writev = os.writev
    monkeypatch.setattr(files.os, "writev", lambda f, group: calls.append(len(group)) or writev(f, group))
    data = chunks(count)
    assert write_all(fd, data) == sum(map(len, data))
    assert contents(fd) == b"".join(data)
    assert calls == ([count] if count <= IOV_MAX else [len(data[start:start + IOV_MAX])
                                                      for start in range(0, count, IOV_MAX)])


@pytest.mark.parametrize("count", [3, IOV_MAX + 5])
def test_a_short_write_is_resumed(fd, count, monkeypatch) -> None:
    writev = os.writev

    def short(f, group):  # the kernel may write less than asked: here, all but the last 3 bytes of the group
        whole = b"".join(bytes(chunk) for chunk in group)
        return writev(f, [whole[:len(whole) - 3]])
    monkeypatch.setattr(files.os, "writev", short)
    data = [memoryview(b"abcdef"), b"xy", bytearray(b"z" * 10)] * (count // 3 + 1)
    data = data[:count]
    assert write_all(fd, data) == sum(map(len, data))
    assert contents(fd) == b"".join(bytes(chunk) for chunk in data)
