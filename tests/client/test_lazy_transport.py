"""client/lazy_transport.py: the real transport is built on first use, once; its methods, once looked up, are
found on the stand-in at once (no failed lookup per call); other attributes are always read from the real one;
close() of one never built builds nothing."""
from __future__ import annotations

from pyspark_ledger.client import lazy_transport
from pyspark_ledger.client.lazy_transport import LazyGrpcTransport


class Real:
    made = 0

    def __init__(self, store, **settings) -> None:
        Real.made += 1
        self.store, self.settings = store, settings
        self.sent: list = []
        self.state = "fresh"
        self.closed = False

    def send_adds(self, *args) -> str:
        self.sent.append(args)
        return "sent"

    def close(self) -> None:
        self.closed = True


def lazy(monkeypatch) -> LazyGrpcTransport:
    import pyspark_ledger.client.transport as transport
    monkeypatch.setattr(transport, "GrpcTransport", Real)
    Real.made = 0
    return LazyGrpcTransport("store", framed_adds=True)


def test_built_once_on_first_use_with_the_arguments_given(monkeypatch):
    stand_in = lazy(monkeypatch)
    assert not stand_in.built and Real.made == 0
    assert stand_in.send_adds("b1", 7) == "sent"
    assert stand_in.send_adds("b1", 8) == "sent"
    assert Real.made == 1 and stand_in.built
    real = stand_in._real
    assert real.store == "store" and real.settings == {"framed_adds": True} and real.sent == [("b1", 7), ("b1", 8)]


def test_a_method_once_looked_up_is_found_without_reaching_getattr(monkeypatch):
    stand_in = lazy(monkeypatch)
    stand_in.send_adds("b1", 1)
    assert stand_in.__dict__["send_adds"].__self__ is stand_in._real  # kept, bound to the real transport
    reached = []
    original = LazyGrpcTransport.__getattr__
    monkeypatch.setattr(LazyGrpcTransport, "__getattr__", lambda self, name: (reached.append(name),
                                                                            original(self, name))[1])
    stand_in.send_adds("b1", 2)
    assert reached == [] and stand_in._real.sent[-1] == ("b1", 2)


def test_other_attributes_are_read_from_the_real_transport_every_time(monkeypatch):
    stand_in = lazy(monkeypatch)
    assert stand_in.state == "fresh"
    stand_in._real.state = "changed"
    assert stand_in.state == "changed" and "state" not in stand_in.__dict__


def test_close_of_one_never_built_builds_nothing_and_close_after_use_closes_the_real(monkeypatch):
    unused = lazy(monkeypatch)
    unused.close()
    assert Real.made == 0 and not unused.built
    used = lazy(monkeypatch)
    used.send_adds("b1", 1)
    used.close()
    assert used._real.closed


def test_the_module_names_no_grpc_at_import():
    assert "grpc" not in vars(lazy_transport)
