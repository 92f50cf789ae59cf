"""The rule by which ``with`` blocks close the writers (``LedgerWriter``, ``LogWriter``)."""
from __future__ import annotations

import logging

import pytest

from pyspark_ledger.client.closing import close_leaving_block
from pyspark_ledger.errors import LedgerFencedError
from pyspark_ledger.metadata.model import IN_RECOVERY

from .conftest import PASSWORD

log = logging.getLogger("tests.closing")


def failing_close() -> None:
    raise LedgerFencedError("ledger 7 was fenced by another client")


def test_a_close_error_after_a_block_that_succeeded_propagates():
    with pytest.raises(LedgerFencedError, match="fenced"):
        close_leaving_block(failing_close, False, log, "ledger 7")


def test_a_close_error_after_a_block_that_raised_is_logged_not_raised(caplog):
    caplog.set_level(logging.WARNING, logger="tests.closing")
    close_leaving_block(failing_close, True, log, "ledger 7")
    assert "closing ledger 7 after an error failed" in caplog.text and "fenced by another client" in caplog.text


def test_the_writer_is_closed_either_way():
    closed = []
    for failed in (False, True):
        close_leaving_block(lambda: closed.append(failed), failed, log, "ledger 7")
    assert closed == [False, True]


def test_an_error_that_is_not_a_ledger_error_always_propagates():
    def broken() -> None:
        raise RuntimeError("a bug")
    for failed in (False, True):
        with pytest.raises(RuntimeError, match="a bug"):
            close_leaving_block(broken, failed, log, "ledger 7")


def being_recovered(store, ledger_id: int) -> None:
    """Another client has started recovering the ledger: the writer's close will fail."""
    stored = store.inner.read_ledger(ledger_id)
    store.inner.write_ledger(stored.value.with_changes(state=IN_RECOVERY), stored.version)


def test_a_fenced_ledger_writer_leaving_a_failing_block_keeps_the_blocks_exception(make_client, store, caplog):
    caplog.set_level(logging.WARNING, logger="pyspark_ledger.client.writer")
    client = make_client()
    with pytest.raises(ValueError, match="the application failed"):
        with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
            writer.append(b"abc")
            being_recovered(store, writer.ledger_id)
            raise ValueError("the application failed")
    assert f"closing ledger {writer.ledger_id} after an error failed" in caplog.text


def test_a_fenced_ledger_writer_leaving_a_block_that_succeeded_raises(make_client, store):
    client = make_client()
    with pytest.raises(LedgerFencedError, match="being recovered"):
        with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
            writer.append(b"abc")
            being_recovered(store, writer.ledger_id)
