"""One BookieClient (channel) and one shared AddStream per bookie, found through the metadata store.

A bookie's id is its ``host:port`` unless it was started with an explicit id;
then its address comes from its registration info (``host`` / ``port``).
Addresses are cached once seen, so a bookie that died and whose
registration expired can still be asked (and answer "unavailable") for the
entries of old fragments. With TLS settings (``tls``, a ``ClientTls``) every channel is a TLS one; a
bookie whose registration says it speaks otherwise ("tls"/"mtls"/plaintext) is refused before dialing,
with a BookieUnavailableError that says which setting to change (``tls_errors.mismatch``), and
``refused()`` lists those bookies with the reason. A broken add stream is replaced by a new one on
the next add. A new stream takes the framed add port (docs/protocol.md W11) from the bookie's registration
as read within the last ``ADD_PORT_MAX_AGE_S`` seconds, else reads it again: a bookie restarted on another
``--add-port`` is reached at its new port, not refused at the old one. ``locations()`` gives the zone and
rack each registration read by ``bookies()`` declared (for zone-aware placement). Every call runs on the
process's shared ``IoLoop``, which ``close()`` releases after closing every stream and channel.
"""
from __future__ import annotations

import threading
import time

from pyspark_ledger.client.add_stream import AddStream
from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT
from pyspark_ledger.client.bookie_rpc import BookieClient, parse_address
from pyspark_ledger.client.io_loop import acquire_io_loop, release_io_loop
from pyspark_ledger.client.tls_errors import mismatch
from pyspark_ledger.errors import BookieUnavailableError, InvalidArgumentError, InvalidStateError, MetadataError
from pyspark_ledger.metadata.bookie_location import Location, read_location
from pyspark_ledger.metadata.store import BookieRegistration, MetadataStore
from pyspark_ledger.status import BookieStatus

ADD_PORT_MAX_AGE_S = 5.0  # a framed add port read longer ago is read again before a new stream uses it


class BookiePool:
    """Channels and add streams to the bookies of one client."""

    def __init__(self, store: MetadataStore, *, timeout: float = 10.0, max_batch_bytes: int = 4 * 1024 * 1024,
                 max_inflight: int = 10_000, max_batches_in_flight: int | None = DEFAULT_BATCHES_IN_FLIGHT, tls=None,
                 answer_runs: bool = True, framed_adds: bool = False, framed_reads: bool = False) -> None:
        self._answer_runs = answer_runs
        self._framed_adds = framed_adds  # docs/protocol.md W11: over TLS too when the client has TLS settings
        self._framed_reads = framed_reads  # docs/protocol.md W12: range reads on the same port
        self._tls = tls if tls is not None and tls.enabled else None
        # read (and checked) once: a bad file fails here, naming its setting
        self._credentials = self._tls.channel_credentials() if self._tls is not None else None
        self._store = store
        self._timeout = timeout
        self._max_batch_bytes = max_batch_bytes
        self._max_inflight = max_inflight
        self._max_batches_in_flight = max_batches_in_flight
        self._lock = threading.Lock()
        self._clients: dict[str, BookieClient] = {}
        self._streams: dict[str, AddStream] = {}
        self._addresses: dict[str, str] = {}
        self._modes: dict[str, object] = {}  # bookie -> the TLS mode its registration gave
        self._add_ports: dict[str, tuple[int, float]] = {}  # bookie -> (its framed add port (W11), read when)
        self._streamed: set[str] = set()  # bookies an add stream was opened to (a new one re-reads the add port)
        self._locations: dict[str, Location] = {}  # bookie -> zone and rack its registration gave
        self._closed = False
        self._io = acquire_io_loop()

    @property
    def io_loop(self):
        """The network loop every stream and call of this pool runs on (None once closed)."""
        return self._io

    def bookies(self, include_read_only: bool = True) -> list[str]:
        """Ids of the registered (live) bookies, sorted; remembers their addresses."""
        registered = self._store.bookies(include_read_only=include_read_only)
        with self._lock:
            for bookie_id, registration in registered.items():
                self._addresses[bookie_id] = _address_of(registration)
                self._modes[bookie_id] = _tls_mode(registration)
                self._add_ports[bookie_id] = (_add_port(registration), time.monotonic())
                self._locations[bookie_id] = read_location(registration.info)
        return sorted(registered)

    def locations(self) -> dict[str, Location]:
        """Zone and rack of every bookie seen registered, as of the last ``bookies()`` (no extra read)."""
        with self._lock:
            return dict(self._locations)

    def refused(self) -> dict[str, str]:
        """Registered bookies this client cannot talk to because of TLS settings: id -> why."""
        with self._lock:
            modes = dict(self._modes)
        refused = {bookie: mismatch(bookie, mode, self._tls) for bookie, mode in modes.items()}
        return {bookie: why for bookie, why in sorted(refused.items()) if why is not None}

    def client(self, bookie_id: str) -> BookieClient:
        """The (cached) client of ``bookie_id``; BookieUnavailableError if it cannot be located."""
        with self._lock:
            self._check_open(bookie_id)
            client = self._clients.get(bookie_id)
            if client is not None:
                return client
        address = self._address(bookie_id)
        with self._lock:
            why = mismatch(bookie_id, self._modes.get(bookie_id), self._tls)
        if why is not None:
            raise BookieUnavailableError(why, bookie_id=bookie_id, status=BookieStatus.UNAVAILABLE)
        with self._lock:
            self._check_open(bookie_id)
            client = self._clients.get(bookie_id)
            if client is None:
                read_port = (lambda: self._add_port(bookie_id, refresh=False)) if self._framed_reads else None
                client = self._clients[bookie_id] = BookieClient(bookie_id, address=address, timeout=self._timeout,
                                                                 io_loop=self._io, tls=self._tls,
                                                                 credentials=self._credentials,
                                                                 answer_runs=self._answer_runs, read_port=read_port)
            return client

    def stream(self, bookie_id: str) -> AddStream:
        """The shared add stream to ``bookie_id`` (a new one once ``forget_stream`` dropped the last)."""
        stream = self._streams.get(bookie_id)
        if stream is not None:
            return stream
        client = self.client(bookie_id)
        # a replaced stream may have failed on a framed port that moved (a bookie restarted on --add-port 0)
        add_port = self._add_port(bookie_id, refresh=bookie_id in self._streamed) if self._framed_adds else 0
        with self._lock:
            self._check_open(bookie_id)
            stream = self._streams.get(bookie_id)
            if stream is None or stream.closed:
                try:
                    stream = client.add_stream(max_inflight=self._max_inflight, max_batch_bytes=self._max_batch_bytes,
                                               max_batches_in_flight=self._max_batches_in_flight, add_port=add_port)
                except InvalidStateError as exc:  # the client was closed underneath us
                    raise BookieUnavailableError(str(exc), bookie_id=bookie_id, status=BookieStatus.CLOSED) from exc
                self._streams[bookie_id] = stream
                self._streamed.add(bookie_id)
            return stream

    def forget_stream(self, bookie_id: str, stream: AddStream) -> None:
        """Drop ``stream`` (it ended) so the next ``stream()`` opens a new one."""
        with self._lock:
            if self._streams.get(bookie_id) is stream:
                del self._streams[bookie_id]

    def close(self) -> None:
        """Close every add stream and channel (joining their threads); idempotent."""
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
            self._streams = {}
            io_loop, self._io = self._io, None
        for client in clients:
            client.close()
        if io_loop is not None:
            release_io_loop(io_loop)

    def _add_port(self, bookie_id: str, refresh: bool) -> int:
        """The framed add port of ``bookie_id`` (docs/protocol.md W11) as its registration said, read again with
        ``refresh`` or when last read over ``ADD_PORT_MAX_AGE_S`` ago; 0 for none (or when the registration cannot
        be read: gRPC then)."""
        with self._lock:
            known = self._add_ports.get(bookie_id)
        if refresh or known is None or time.monotonic() - known[1] > ADD_PORT_MAX_AGE_S:
            try:
                registered = self._store.bookies(include_read_only=True)
            except MetadataError:
                registered = {}
            if bookie_id in registered:
                with self._lock:
                    self._add_ports[bookie_id] = (_add_port(registered[bookie_id]), time.monotonic())
        with self._lock:
            known = self._add_ports.get(bookie_id)
        return known[0] if known is not None else 0

    def _check_open(self, bookie_id: str) -> None:
        if self._closed:
            raise BookieUnavailableError(f"the client is closed; cannot reach bookie {bookie_id}",
                                         bookie_id=bookie_id, status=BookieStatus.CLOSED)

    def _address(self, bookie_id: str) -> str:
        with self._lock:
            known = self._addresses.get(bookie_id)
        if known is not None:
            return known
        try:
            registered = self._store.bookies(include_read_only=True)
        except MetadataError as exc:
            raise BookieUnavailableError(f"cannot look up bookie {bookie_id}: {exc}", bookie_id=bookie_id,
                                         status=BookieStatus.UNAVAILABLE) from exc
        if bookie_id in registered:
            address = _address_of(registered[bookie_id])
            with self._lock:
                self._modes[bookie_id] = _tls_mode(registered[bookie_id])
                self._add_ports[bookie_id] = (_add_port(registered[bookie_id]), time.monotonic())
        else:
            try:
                parse_address(bookie_id)
            except InvalidArgumentError as exc:
                raise BookieUnavailableError(
                    f"bookie {bookie_id} is not registered and its id is not a host:port address, so it cannot "
                    "be reached", bookie_id=bookie_id, status=BookieStatus.UNAVAILABLE) from exc
            address = bookie_id
        with self._lock:
            self._addresses[bookie_id] = address
        return address


def _address_of(registration: BookieRegistration) -> str:
    """``host:port`` from the registration info, or the id itself when the info has none."""
    info = registration.info or {}
    host, port = info.get("host"), info.get("port")
    if host and isinstance(port, int):
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return registration.bookie_id


def _add_port(registration: BookieRegistration) -> int:
    """The framed add port the registration names (docs/protocol.md W11), 0 when it names none (or nonsense)."""
    port = (registration.info or {}).get("add_port")
    return port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else 0


def _tls_mode(registration: BookieRegistration) -> object:
    """What the registration says of the bookie's TLS ("tls", "mtls", "" = plaintext; None if it does not say)."""
    return (registration.info or {}).get("tls")
