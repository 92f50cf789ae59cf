"""GrpcTransport puts adds straight into the bookie's stream queue: a bookie it cannot reach is refused at
once, on the caller's thread, with nothing sent (the writer treats that as the bookie's failure)."""
from __future__ import annotations

import pytest

from pyspark_ledger.client.transport import GrpcTransport
from pyspark_ledger.errors import BookieUnavailableError


class Listener:
    def __init__(self):
        self.calls = []

    def on_add_results(self, bookie_id, results):
        self.calls.append(("results", bookie_id))

    def on_add_failure(self, bookie_id, keys, error):
        self.calls.append(("failure", bookie_id, keys))


def test_an_unregistered_bookie_is_refused_at_once_and_so_is_every_bookie_after_close(store):
    transport = GrpcTransport(store)
    listener = Listener()
    try:
        refused = transport.send_adds_to(["gone-1", "gone-2"], 3, [(5, b"a"), (6, b"b")], listener)
        assert [(bookie, error.status) for bookie, error in refused] == [("gone-1", "UNAVAILABLE"),
                                                                         ("gone-2", "UNAVAILABLE")]
        with pytest.raises(BookieUnavailableError, match="gone-1"):
            transport.send_adds("gone-1", 3, [(7, b"c")], listener)
    finally:
        transport.close()
    refused = transport.send_adds_to(["gone-1"], 3, [(8, b"d")], listener)
    assert [(bookie, error.status) for bookie, error in refused] == [("gone-1", "CLOSED")]
    assert listener.calls == [], "a refused add is reported once, by the call, never also to the listener"
