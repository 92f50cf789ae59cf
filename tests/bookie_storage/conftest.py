"""Fixtures of the storage tests: a data directory and storages that are closed at teardown."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from bookie_server.storage import BookieStorage, StorageConfig
from tests.bookie_storage.entries import JOURNAL_MODE_ENV, JOURNAL_MODES, journal_settings_from_env


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "bookie"


@pytest.fixture
def open_storage(data_dir: Path) -> Iterator[Callable[..., BookieStorage]]:
    """Opens storages (default: data_dir, no background checkpoints) and closes them all at teardown."""
    opened: list[BookieStorage] = []

    def _open(directory: Path | None = None, on_journal_sync=None, **settings) -> BookieStorage:
        settings.setdefault("checkpoint_interval_s", 0)
        settings = {**journal_settings_from_env(), **settings}
        storage = BookieStorage(StorageConfig(directory or data_dir, **settings), on_journal_sync)
        opened.append(storage)
        return storage

    yield _open
    for storage in opened:
        storage.close()


@pytest.fixture(params=sorted(JOURNAL_MODES))
def journal_mode(request, monkeypatch) -> str:
    """Runs the test (its storages and child processes) with each journal mode (use it with usefixtures)."""
    monkeypatch.setenv(JOURNAL_MODE_ENV, request.param)
    return request.param
