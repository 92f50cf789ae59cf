"""Delayed ensemble change: whether a writer may keep failed bookies in its ensemble for now.

BookKeeper's ``delayEnsembleChange``: when a write to one bookie of an
entry's write set fails (or the bookie stays silent), but the entry can still
reach its ack quorum (Qa) from the other bookies of the write set, the client
does not replace the bookie at once. The bookie is *degraded*: entries are
confirmed with Qa acks from the others -- they keep Qa copies instead of Qw,
the same trade-off as for entries left behind by an ensemble change when
Qa < Qw (docs/protocol.md W6). The
replacement is made only when a further failure would block confirmation.

This project decides on the write sets of the ensemble rather than on the
entries pending at the moment: a change may wait while *every* write set
(there are E of them, one when Qw = E) keeps at least Qa bookies that did
not fail. Entries to come use those same write sets, so a delayed change can
never leave a later add unable to reach Qa; with Qw = Qa no failure can be
delayed. Pure functions over bookie indexes, no I/O.
"""
from __future__ import annotations

from typing import Collection

from pyspark_ledger.protocol.schedule import Quorums, all_write_sets


def ack_quorum_reachable(quorums: Quorums, failed: Collection[int]) -> bool:
    """Whether every write set of the ensemble keeps >= Qa bookies outside ``failed`` (indexes)."""
    return all(
        sum(1 for index in write_set if index not in failed) >= quorums.ack_quorum
        for write_set in all_write_sets(quorums.ensemble_size, quorums.write_quorum)
    )


def may_delay_change(quorums: Quorums, failed: Collection[int]) -> bool:
    """Whether the bookies at ``failed`` may stay in the ensemble as degraded bookies (no change yet).

    False when nothing failed (there is nothing to delay) or when some write set
    could no longer reach Qa: then one ensemble change replaces every failed bookie.
    """
    return bool(failed) and ack_quorum_reachable(quorums, failed)
