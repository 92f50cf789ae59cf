"""Who hears an add stream's answers: the ``AddListener`` protocol, ``AddCallbacks`` (a listener made of
callables), and how a stream calls them (``acks_callback``, ``notify``): on the loop thread, never blocking, and a
listener's failure is logged and never stops the stream (``add_stream``)."""
from __future__ import annotations

import logging
from typing import Callable, Protocol

from pyspark_ledger.client.add_wire import as_results
from pyspark_ledger.errors import BookieError

log = logging.getLogger("pyspark_ledger.client.add_stream")  # a listener's failure is the stream's to log


class AddListener(Protocol):
    def on_add_results(self, bookie_id: str, results: list) -> None: ...

    def on_add_failure(self, bookie_id: str, keys: list[tuple[int, int]], error: BookieError) -> None: ...


class AddCallbacks:
    """An AddListener made of two callables, and a third for runs of OK answers (else they reach the first)."""

    __slots__ = ("on_add_results", "on_add_failure", "on_add_acks")

    def __init__(self, on_add_results: Callable[[str, list], None],
                 on_add_failure: Callable[[str, list[tuple[int, int]], BookieError], None],
                 on_add_acks: Callable[[str, list[tuple[int, range]]], None] | None = None) -> None:
        self.on_add_results = on_add_results
        self.on_add_failure = on_add_failure
        self.on_add_acks = on_add_acks or (lambda bookie_id, spans: on_add_results(bookie_id, as_results(spans)))


def acks_callback(listener: AddListener):
    """The listener's ``on_add_acks``, or one that hands the runs to its ``on_add_results``."""
    callback = getattr(listener, "on_add_acks", None)
    if callback is not None:
        return callback
    return lambda bookie_id, spans: listener.on_add_results(bookie_id, as_results(spans))


def notify(callback, *args) -> None:
    try:
        callback(*args)
    except Exception:  # noqa: BLE001 - a listener's bug must not stop the stream
        log.exception("add stream listener %r failed", callback)
