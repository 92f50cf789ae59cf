"""A ``GrpcTransport`` made on first use: a client that only reads metadata never imports gRPC.

Spark starts fresh Python processes for a data source's planning and commit
(docs/measurements.md, "The first Spark job after a minute idle"); those read
and write metadata only, yet each made a ``LedgerClient`` and with it the gRPC
transport: gRPC, protobuf, asyncio and the shared network thread. ``LazyGrpcTransport``
holds the transport's arguments and builds the real one, once and thread-safely,
the first time anything of it is used (the list of bookies, an add, a read);
``close()`` of one never built closes nothing. ``LedgerClient`` uses it when
TLS is off (with TLS, the credentials are read at construction anyway, so the
transport is made at once and a bad file still fails there).
"""
from __future__ import annotations

import threading
from typing import Any


class LazyGrpcTransport:
    """Stands for ``GrpcTransport(store, **settings)`` until first used (see the module docstring)."""

    def __init__(self, store, **settings: Any) -> None:
        self._store = store
        self._settings = settings
        self._lock = threading.Lock()
        self._real = None
        self._closed = False

    def _transport(self):
        real = self._real
        if real is None:
            with self._lock:
                if self._real is None:
                    from pyspark_ledger.client.transport import GrpcTransport
                    self._real = GrpcTransport(self._store, **self._settings)
                    if self._closed:  # used after close: behave as a closed transport does
                        self._real.close()
                real = self._real
        return real

    @property
    def built(self) -> bool:
        """Whether the real transport exists (for tests and diagnostics)."""
        return self._real is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            real = self._real
        if real is not None:
            real.close()

    def __getattr__(self, name: str):
        """What the real transport has by that name. Its methods are kept on this object once looked up, so the
        next lookup finds them at once: a lookup that reaches here first fails the ordinary way (an AttributeError
        made and dropped), which the writer's three sends per add paid (docs/measurements.md, "Instructions per
        paced add in the client, session 29")."""
        if name.startswith("__"):
            raise AttributeError(name)
        real = self._transport()
        value = getattr(real, name)
        if getattr(value, "__self__", None) is real:  # a method bound to the real transport, which never changes
            self.__dict__[name] = value
        return value
