"""Striped reads: which replica is asked for which entries of a batch, and the answers put back in order.

With E > Qw no bookie stores every entry: bookie ``i`` of an ensemble stores
the entries whose write set (``schedule.write_set``: ``(e + k) % E`` for
``k < Qw``) includes ``i``, so a contiguous range read from one bookie stops
after at most Qw entries. But every entry ``e`` with the same ``e % E`` has
the same write set. ``split_batch`` therefore cuts a batch ``first..last`` into
up to E *stripes*: stripe ``r`` holds ``first + r, first + r + E, ...``, is
one strided range read (``entry_step = E``), and all of its entries are stored
by the same replicas, so ``reads.ReadPlan`` for the stripe's first entry says
whom to ask for all of them and whom next after an error, a "no such entry",
a corrupt entry or a slow answer. The stripes are read in parallel; each entry
of the batch is in exactly one stripe, and the stripes start on E different
bookies (the first replica of each write set). With E == Qw every bookie
stores every entry: the batch stays one contiguous read (step 1). A reader's
batch is ``stripes_per_batch`` times ``read_batch_entries`` long, so that each
range read holds as many entries as one contiguous read would.

A stripe's answer may be short (byte budget, a missing or corrupt entry):
``stripe_rest`` is what is left of it to read. ``merged_prefix`` interleaves
the stripes' answers back into entry order, up to the first entry not read.
"""
from __future__ import annotations

from typing import Sequence, TypeVar

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata.model import check_quorums
from pyspark_ledger.protocol.read_rules import ReadBatch

T = TypeVar("T")


def stripes_per_batch(ensemble_size: int, write_quorum: int) -> int:
    """How many stripes ``split_batch`` cuts a long batch into: E, or 1 when E == Qw. A reader makes its
    batches this many times ``read_batch_entries`` long, so that each range read still holds that many."""
    check_quorums(ensemble_size, write_quorum, 1)
    return 1 if ensemble_size == write_quorum else ensemble_size


def split_batch(batch: ReadBatch, write_quorum: int) -> tuple[ReadBatch, ...]:
    """The stripes of ``batch`` (a step-1 batch of one fragment), in the order of their first entries."""
    ensemble_size = len(batch.ensemble)
    check_quorums(ensemble_size, write_quorum, 1)
    if batch.step != 1 or batch.last_entry_id < batch.first_entry_id:
        raise InvalidArgumentError(f"cannot split {batch}: need a contiguous, non-empty batch")
    if ensemble_size == write_quorum:
        return (batch,)
    count = batch.last_entry_id - batch.first_entry_id + 1
    stripes = []
    for offset in range(min(ensemble_size, count)):
        first = batch.first_entry_id + offset
        last = batch.last_entry_id - (batch.last_entry_id - first) % ensemble_size
        stripes.append(ReadBatch(first, last, batch.ensemble, ensemble_size))
    return tuple(stripes)


def stripe_size(stripe: ReadBatch) -> int:
    """How many entries ``stripe`` holds."""
    return (stripe.last_entry_id - stripe.first_entry_id) // stripe.step + 1


def stripe_rest(stripe: ReadBatch, read: int) -> ReadBatch | None:
    """What is left of ``stripe`` once its first ``read`` entries were read (None: nothing)."""
    if not 0 <= read <= stripe_size(stripe):
        raise InvalidArgumentError(f"{read} entries read of a stripe of {stripe_size(stripe)}")
    first = stripe.first_entry_id + read * stripe.step
    if first > stripe.last_entry_id:
        return None
    return ReadBatch(first, stripe.last_entry_id, stripe.ensemble, stripe.step)


def merged_prefix(batch: ReadBatch, answers: Sequence[Sequence[T]]) -> list[T]:
    """The entries of ``batch`` in order, from the stripes' answers (``answers[r]``: the first entries of stripe
    ``r`` of ``split_batch``, in order), up to the first entry no answer holds."""
    count = batch.last_entry_id - batch.first_entry_id + 1
    stripes = len(answers)
    if not 1 <= stripes <= count:
        raise InvalidArgumentError(f"{stripes} stripes for a batch of {count} entries")
    length = min([count] + [len(answer) * stripes + offset for offset, answer in enumerate(answers)])
    merged: list = [None] * length
    for offset, answer in enumerate(answers):
        slots = range(offset, length, stripes)
        merged[offset:length:stripes] = answer[:len(slots)]
    return merged
