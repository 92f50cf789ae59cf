"""Python's cyclic garbage collector in a long-running bookie: the heap alive at start is frozen.

A full (generation 2) collection walks every container object of the process, holding the GIL: every add in
flight waits for it. In a bookie just started that is mostly the imported modules (gRPC, protobuf, the
metadata store's client, the bookie's own), some 33,500 objects: one full collection of them took 12.6 ms in
a quiet process, and 22-125 ms in the bookies of paced runs on the shared 2-core test machine
(``bench/paced_stages.py``, whose probes add their own records to that heap). Python runs one whenever the
objects that survived the younger generations since the last one exceed a quarter of the long-lived heap.

``freeze_startup_heap()`` runs one collection and then ``gc.freeze()``: what is alive once the bookie has
started moves to a permanent generation that later collections skip. Those objects live as long as the
process anyway (modules, the server, the storage), so nothing is kept that would otherwise be freed, except
garbage cycles among them that a collection would have broken later -- none after the collection made just
before. Later collections walk only what the bookie created since: the adds in flight, ledger states, index
pages (in the same probed runs: none, or 0.7-2.8 ms). Figures: docs/measurements.md, "The paced add, stage by
stage".
"""
from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then freeze what is alive (skipped by every later collection); how many objects froze."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d objects alive at start out of later garbage collections", frozen)
    return frozen
