"""A stream knows its password: the check kept in its record, verified before the stream is read or written.

The record of a stream keeps ``password_check``: ``entry.salted_check`` of the
password its ledgers are written with, under ``CHECK_LABEL`` (a label of its
own, so a ledger's ``password_check`` can never pass for it), never the
password itself. ``create_stream`` sets it. Every operation that reads or
writes a stream with a password calls ``verify_password`` first, before it
creates, fences or opens any ledger; a password that does not match raises
UnauthorizedError naming where the password came from
(``LogContext.password_name``: StreamClient's parameter, the Spark option).
Commits and log writers check again inside their compare-and-set
(``check_record``), so a stream re-created meanwhile with another password is
refused too.

Records written before streams kept a check have none (None). The first
verification against such a record decides:

- the stream has ledgers: the password must match the ``password_check`` of
  its first ledger still in the metadata (partitions in order, oldest ledger
  first). A stream whose ledgers were written with different passwords (which
  the old code let a Spark write do) thus keeps the password of that ledger;
- it has none: a writer's password is taken (the first password used to
  write); a reader passes and records nothing, since there is nothing to read
  and an inspection with any password (``ledger streams show``) must not claim
  the stream.

A password taken is recorded by compare-and-set; if another client recorded
a check first, the password is verified against that one instead.
"""
from __future__ import annotations

import hmac
from dataclasses import replace

from pyspark_ledger.entry import check_salt, salted_check, verify_password as verify_ledger_password
from pyspark_ledger.errors import MetadataError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.stream_store import read_stream, update_stream

CHECK_LABEL = b"pyspark-ledger/stream-password-check"


def stream_password_check(password: bytes, salt: bytes | None = None) -> str:
    """The check a stream record keeps of ``password`` (a fresh salt unless one is given)."""
    return salted_check(CHECK_LABEL, password, salt)


def matches(password: bytes, check: str, stream: str) -> bool:
    """Whether ``password`` is the one ``check`` was made of; MetadataError if the check is malformed."""
    try:
        salt = check_salt(check)
    except ValueError as exc:
        raise MetadataError(f"the password check in the record of stream {stream!r} is malformed ({exc}): the "
                            "record was changed by something other than pyspark-ledger") from None
    return hmac.compare_digest(stream_password_check(password, salt), check)


def refused(stream: str, password: bytes, password_name: str) -> UnauthorizedError:
    """The error of a password that does not match the stream's; never shows either password."""
    given = "is not set (empty), which does not match" if not password else "does not match"
    return UnauthorizedError(f"{password_name} {given} the password of stream {stream!r}: give the password "
                             "the stream was created with (its ledgers are written with it)")


def check_record(ctx: LogContext, record: StreamRecord) -> None:
    """UnauthorizedError unless the record's check (if it has one) matches the context's password."""
    if record.password_check is not None and not matches(ctx.password, record.password_check, record.name):
        raise refused(record.name, ctx.password, ctx.password_name)


def verify_password(ctx: LogContext, stream: str, *, write: bool) -> StreamRecord:
    """The stream's record once the context's password is verified against it (see the module docstring).

    ``write``: the caller is about to write, so an old record without a check or
    ledgers takes this password. NoSuchKeyError if the stream does not exist.
    """
    record = read_stream(ctx.store, stream).value
    if record.password_check is not None:
        check_record(ctx, record)
        return record
    ledger_check = _first_ledger_check(ctx, record)
    if ledger_check is None and not write:
        return record
    if ledger_check is not None:
        try:
            verify_ledger_password(ctx.password, ledger_check)
        except UnauthorizedError:
            raise refused(stream, ctx.password, ctx.password_name) from None
    return _record_check(ctx, stream)


def _first_ledger_check(ctx: LogContext, record: StreamRecord) -> str | None:
    """The ``password_check`` of the stream's first ledger still in the metadata; None if there is none."""
    for part in record.partitions:
        for ledger_id in part.ledger_ids:
            try:
                check = ctx.client.ledger_metadata(ledger_id).password_check
            except NoSuchLedgerError:
                continue
            if check:
                return check
    return None


def _record_check(ctx: LogContext, stream: str) -> StreamRecord:
    """Record the check of the context's password, unless another client recorded one first."""
    new_check = stream_password_check(ctx.password)

    def transition(current: StreamRecord) -> StreamRecord | None:
        if current.password_check is not None:
            check_record(ctx, current)
            return None
        return replace(current, password_check=new_check)

    stored, _ = update_stream(ctx.store, stream, transition)
    return stored.value
