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
- ``check_bookies_for_write(..., min_ack_zones=m)`` with m >= 2 (the client's
  ``min_ack_quorum_zones``): Qa >= m (an ack quorum of Qa bookies spans at
  most Qa zones), else InvalidConfigurationError; and an ensemble of the
  writable bookies' zones where every ack quorum spans m zones
  (docs/protocol.md P2, P3), else NotEnoughBookiesError naming the zones. The
  same placement the writes make is tried once, on the bookies registered now.

Messages name the settings as the caller's API does: ``LOG_API`` (the
keywords of ``create_stream``) by default; the Spark sink passes its option
names. Used by ``log_writer`` and by ``pyspark_ledger.spark.sink_plan``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pyspark_ledger.errors import InvalidConfigurationError, NotEnoughBookiesError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.metadata.bookie_location import read_location
from pyspark_ledger.metadata.model import check_quorums
from pyspark_ledger.metadata.store import MetadataStore
from pyspark_ledger.protocol.zone_placement import place_ensemble


@dataclass(frozen=True)
class ReplicationNames:
    """How a caller's API names E, Qw and Qa, and says that an existing stream's replication is fixed."""

    ensemble: str = "ensemble_size"
    write: str = "write_quorum"
    ack: str = "ack_quorum"
    zones: str = "min_ack_quorum_zones"
    fixed: str = "fixed when it was created by create_stream"


LOG_API = ReplicationNames()


def check_bookies_for_write(store: MetadataStore, uri: str, stream: str, replication: Replication, *,
                            stream_exists: bool, names: ReplicationNames = LOG_API, min_ack_zones: int = 1) -> None:
    """NotEnoughBookiesError unless ``replication.ensemble_size`` writable bookies are registered and, for
    ``min_ack_zones`` >= 2, their zones let every ack quorum span that many zones (see the module docstring)."""
    registered = store.bookies(include_read_only=True)
    writable = sorted(bookie for bookie, registration in registered.items() if not registration.read_only)
    needed = replication.ensemble_size
    if len(writable) >= needed:
        if min_ack_zones > 1:
            _check_zones(registered, writable, uri, stream, replication, min_ack_zones, stream_exists, names)
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


def _check_zones(registered, writable: list[str], uri: str, stream: str, replication: Replication,
                 min_ack_zones: int, stream_exists: bool, names: ReplicationNames) -> None:
    ack = replication.ack_quorum
    held = (f"stream {stream!r} has {names.ack}={ack} ({names.fixed})" if stream_exists
            else f"option {names.ack}={ack}")
    if min_ack_zones > ack:
        raise InvalidConfigurationError(
            f"{names.zones}={min_ack_zones} cannot be met: {held}, and an ack quorum of {ack} bookie(s) spans at "
            f"most {ack} zone(s) (docs/protocol.md P2); use {names.zones} <= {ack}"
            + ("" if stream_exists else f" or a larger {names.ack}") + ". Nothing was written")
    locations = {bookie: read_location(registered[bookie].info) for bookie in writable}
    try:
        place_ensemble(writable, replication.ensemble_size, (), random.Random(0), locations=locations,
                       write_quorum=replication.write_quorum, ack_quorum=ack, min_ack_zones=min_ack_zones)
    except NotEnoughBookiesError as exc:
        raise NotEnoughBookiesError(f"{names.zones}={min_ack_zones}: the {len(writable)} writable bookie(s) of "
                                    f"{uri} cannot hold a ledger of stream {stream!r}: {exc}. Nothing was written"
                                    ) from None


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
