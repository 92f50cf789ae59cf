"""A writer's check, before it creates or fences anything, that its stream's ledgers can be placed.

Every ledger of a stream is created on ``ensemble_size`` writable bookies.
With fewer registered, the write would fail later and less clearly: a
``LogWriter`` after fencing the log's current writer, a Spark write in every
task in turn (retried by Spark) before the error reached the user. So the
writer checks first, once, and fails with one line naming the setting, how
many bookies are live and writable, and what to do:

- ``check_bookies_for_write``: enough writable bookies for E. It counts the
  bookies registered in the metadata store now; one registered but unreachable
  is still found by the writes themselves.
- ``check_stream_replication``: the replication a stream record holds obeys
  E >= Qw >= Qa >= 1 (``create_stream`` checks it; a record changed by hand
  or damaged may not).

Messages name the settings as the caller's API does: ``LOG_API`` (the
keywords of ``create_stream``) by default; the Spark sink passes its option
names. Used by ``log_writer`` and by ``pyspark_ledger.spark.sink_plan``.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark_ledger.errors import InvalidConfigurationError, NotEnoughBookiesError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.metadata.model import check_quorums
from pyspark_ledger.metadata.store import MetadataStore


@dataclass(frozen=True)
class ReplicationNames:
    """How a caller's API names E, Qw and Qa, and says that an existing stream's replication is fixed."""

    ensemble: str = "ensemble_size"
    write: str = "write_quorum"
    ack: str = "ack_quorum"
    fixed: str = "fixed when it was created by create_stream"


LOG_API = ReplicationNames()


def check_bookies_for_write(store: MetadataStore, uri: str, stream: str, replication: Replication, *,
                            stream_exists: bool, names: ReplicationNames = LOG_API) -> None:
    """NotEnoughBookiesError unless ``replication.ensemble_size`` writable bookies are registered."""
    registered = store.bookies(include_read_only=True)
    writable = sorted(bookie for bookie, registration in registered.items() if not registration.read_only)
    needed = replication.ensemble_size
    if len(writable) >= needed:
        return
    read_only = len(registered) - len(writable)
    live = f"{len(registered)} live" + (f", {read_only} of them read-only" if read_only else "")
    if stream_exists:
        wanted = f"stream {stream!r} is replicated on {names.ensemble}={needed} bookies ({names.fixed})"
        remedy = f"start {needed - len(writable)} more bookie(s) or make read-only ones writable"
    else:
        wanted = f"option {names.ensemble}={needed} asks for {needed} bookies per ledger"
        remedy = (f"start {needed - len(writable)} more bookie(s), or write with "
                  f"{names.ensemble}={max(len(writable), 1)} or less ({names.write} and {names.ack} no larger)")
    raise NotEnoughBookiesError(
        f"{wanted}, but {uri} has only {len(writable)} writable bookie(s) ({live}); {remedy}. "
        "Nothing was written")


def check_stream_replication(stream: str, replication: Replication, names: ReplicationNames = LOG_API) -> None:
    """InvalidConfigurationError unless the stream record's E, Qw, Qa are whole numbers with E >= Qw >= Qa >= 1."""
    try:
        check_quorums(replication.ensemble_size, replication.write_quorum, replication.ack_quorum)
    except InvalidConfigurationError:
        held = (f"{names.ensemble}={replication.ensemble_size!r}, {names.write}={replication.write_quorum!r}, "
                f"{names.ack}={replication.ack_quorum!r}")
        raise InvalidConfigurationError(
            f"stream {stream!r} records {held}, which breaks {names.ensemble} >= {names.write} >= {names.ack} "
            ">= 1 (its record was changed by hand or is damaged); nothing was written: write to a new stream "
            "created with valid settings") from None
