"""A write's check, on the driver at planning, that enough writable bookies are live for its ensemble.

Every write task creates a ledger on ``ensembleSize`` writable bookies. With
fewer registered, each task would fail in turn (and Spark retry it) before
the error reached the user; ``check_bookies_for_write`` fails first, once,
naming E, how many bookies are live and writable, and what to do. It counts
the bookies registered in the metadata store now; a bookie that is
registered but unreachable from the executors is still found by the tasks.
"""
from __future__ import annotations

from pyspark_ledger.errors import NotEnoughBookiesError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.metadata.store import MetadataStore


def check_bookies_for_write(store: MetadataStore, uri: str, stream: str, replication: Replication, *,
                            stream_exists: bool) -> None:
    """NotEnoughBookiesError unless ``replication.ensemble_size`` writable bookies are registered."""
    registered = store.bookies(include_read_only=True)
    writable = sorted(bookie for bookie, registration in registered.items() if not registration.read_only)
    needed = replication.ensemble_size
    if len(writable) >= needed:
        return
    read_only = len(registered) - len(writable)
    live = f"{len(registered)} live" + (f", {read_only} of them read-only" if read_only else "")
    if stream_exists:
        wanted = (f"stream {stream!r} is replicated on ensembleSize={needed} bookies (fixed when it was "
                  "created; the write's replication options do not change it)")
        remedy = f"start {needed - len(writable)} more bookie(s) or make read-only ones writable"
    else:
        wanted = f"option ensembleSize={needed} asks for {needed} bookies per ledger"
        remedy = (f"start {needed - len(writable)} more bookie(s), or write with "
                  f"ensembleSize={max(len(writable), 1)} or less (writeQuorum and ackQuorum no larger)")
    raise NotEnoughBookiesError(
        f"{wanted}, but {uri} has only {len(writable)} writable bookie(s) ({live}); {remedy}. "
        "Nothing was written")
