"""The replication client's configuration: one frozen dataclass with documented defaults.

Pass it as ``LedgerClient(uri, config=ClientConfig(add_timeout_s=5.0))``;
``dataclasses.replace(config, ...)`` derives variants. Every value is checked
when the object is built, and a bad one raises InvalidConfigurationError
naming the field, the value and what is accepted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_ledger.client.batch_window import DEFAULT_BATCHES_IN_FLIGHT, check_batches_in_flight
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.protocol.placement import PlacementPolicy
from pyspark_ledger.protocol.zone_placement import MAX_ACK_ZONES, ZoneAwarePlacement
from pyspark_ledger.protocol.quarantine import ChangeBackoff, QuarantineRule
from pyspark_ledger.protocol.recovery_window import MAX_RECOVERY_READ_WINDOW
from pyspark_ledger.security.tls import ClientTls

MiB = 1024 * 1024


@dataclass(frozen=True)
class ClientConfig:
    """Timeouts, placement, reads, batching and flow control of a LedgerClient.

    Times are in seconds.
    """

    #: An add unanswered by a bookie for this long counts as that bookie failing
    #: (the writer then replaces it: an ensemble change; see ``delay_ensemble_change``).
    add_timeout_s: float = 10.0
    #: Deadline of one read / fencing read / LAC read request to one bookie.
    read_timeout_s: float = 10.0
    #: A read not answered after this long is also sent to the entry's next
    #: replica (speculative read); ``None`` turns speculative reads off. One clock
    #: per range read, started when the reader waits for it (not when it was read
    #: ahead), started again whenever an answer of any of the reader's reads
    #: arrives, and stopped when an answer of this read arrives (docs/protocol.md L7).
    speculative_read_delay_s: float | None = 0.05
    #: Adds of one writer that may be unconfirmed at once; ``append`` blocks beyond it.
    max_inflight_adds: int = 4000
    #: Explicit LAC: when a writer's last add confirmed has moved past what its
    #: last entry carried and it sent no entry for this long, it tells the
    #: bookies its LAC (a ``WriteLac`` to the current ensemble), so tailing
    #: readers see the last entry of a burst without waiting for the next one.
    #: 0 turns it off (readers then see an entry once a later one is written).
    explicit_lac_interval_s: float = 0.1
    #: Bytes of queued adds coalesced into one streamed message to a bookie.
    max_batch_bytes: int = 4 * MiB
    #: Messages (AddBatches) of small adds an add stream keeps unanswered by its bookie, 1 to 1,024; adds
    #: queued meanwhile leave together in the next message once an answer frees a place, so a bookie that
    #: falls behind gets fewer, larger messages instead of a pile of small ones. Adds of 64 KiB or more
    #: are never held back. None (the default): 2 on a framed add stream, 1 on gRPC (docs/protocol.md W10).
    add_batches_in_flight: int | None = DEFAULT_BATCHES_IN_FLIGHT
    #: Ask bookies to answer OK adds as runs of entry ids (docs/protocol.md W9);
    #: bookies that do not know the form answer each add, which works too.
    add_answer_runs: bool = True
    #: Send adds over a bookie's framed add port (docs/protocol.md W11: the add path without gRPC, a third of
    #: the transport's CPU per message) when its registration names one (over TLS with TLS settings); bookies
    #: without it get gRPC add streams. False keeps every add stream on gRPC.
    framed_adds: bool = True
    #: Send range reads over the same framed port (docs/protocol.md W12: no gRPC copies of the answers; up to 4
    #: connections per bookie); bookies without it, or that do not take reads there, are read over gRPC, and
    #: fencing reads always are. False keeps every read on gRPC.
    framed_reads: bool = True
    #: Largest encoded entry (payload + 36-byte header + digest) a writer sends;
    #: keep it at or below the bookies' ``--max-entry-size`` (default 5 MiB).
    max_entry_bytes: int = 5 * MiB
    #: Entries asked for in one range read, and the byte cap of one range read.
    read_batch_entries: int = 512
    read_batch_bytes: int = 8 * MiB
    #: Range reads a reader keeps in flight ahead of the entry it is yielding.
    read_ahead_batches: int = 3
    #: How long ``close()`` of a writer waits for its in-flight adds to finish;
    #: adds still unconfirmed then fail with LedgerClosedError.
    close_timeout_s: float = 30.0
    #: Upper bound on one recovery (fence, read forward, write back, close).
    recovery_timeout_s: float = 120.0
    #: Entries recovery reads forward at once, past the lowest one it has not decided yet
    #: (docs/protocol.md R9; sent as range reads of at most ``read_batch_entries``). 1 to 8,192;
    #: 1 reads one entry at a time. Recovery holds up to this many entries' bodies.
    recovery_read_window: int = 256
    #: Longest single long poll of a tailing reader (``wait_for_entry`` repeats it).
    long_poll_timeout_s: float = 5.0
    #: Attempts of the metadata update loop (ensemble change, close, recovery, re-replication, delete).
    metadata_retries: int = 20
    #: Unused: reads no longer need threads (answers arrive on the client's
    #: network thread). Kept so that existing configurations stay valid.
    io_threads: int = 16
    #: Ensemble placement. The default spreads every write quorum over as many zones, then racks, as the
    #: bookies' ``--zone`` / ``--rack`` allow, and is the uniform random choice when no bookie declares one
    #: (docs/protocol.md P1-P4). A policy with only ``choose_ensemble``/``replace_bookie`` ignores zones.
    placement: PlacementPolicy = field(default_factory=ZoneAwarePlacement)
    #: Zones every ack quorum must span (docs/protocol.md P2, P3). 1 (default): place with the best spread
    #: available and log a warning when it falls short. m >= 2: refuse (NotEnoughBookiesError naming the zones)
    #: any ensemble or replacement where some Qa bookies of a write quorum could all lie within m - 1 zones.
    #: 2 makes the loss of one whole zone lose no acknowledged entry (it needs Qa >= 2 and, per write
    #: quorum, at most Qa - 1 bookies in any one zone).
    min_ack_quorum_zones: int = 1
    #: Seed of the placement's random choices; ``None`` = seeded from the OS.
    placement_seed: int | None = None
    #: Delayed ensemble change (BookKeeper's ``delayEnsembleChange``): a bookie
    #: that fails, or stays silent for ``add_timeout_s``, is kept in the ensemble
    #: ("degraded", see ``LedgerWriter.degraded_bookies``) while every write set
    #: still has Qa other bookies; entries are then confirmed without it and keep
    #: Qa copies instead of Qw. One ensemble change replaces every failed bookie
    #: once a further failure would block confirmation. False: replace at once.
    delay_ensemble_change: bool = False
    #: How long placement avoids a bookie that failed this client (first failure 5 s, doubled per
    #: repeated failure, at most 120 s). A preference, not a ban: when no other bookie is left a
    #: quarantined one is used, the one whose quarantine ends first (``protocol.quarantine``).
    quarantine: QuarantineRule = field(default_factory=QuarantineRule)
    #: Back-off between the ensemble changes of one ledger while bookies keep failing (0.1 s doubled
    #: up to 1 s): at most 5 + floor(T - 1.5) changes in T s of flapping (``protocol.quarantine``).
    ensemble_change_backoff: ChangeBackoff = field(default_factory=ChangeBackoff)
    #: The cluster's repair key file (private half, mode 0600; ``ledger security init-repair-key`` makes
    #: it). A client holding it is an administrator: it opens any ledger's sealed password to
    #: re-replicate, recover or delete it. None (the default): only the passwords it is given.
    repair_key_file: str | None = None
    #: TLS to the bookies (``security.tls.ClientTls``: the CA to trust, and a client certificate and key
    #: for mutual TLS). The default comes from the environment (``LEDGER_TLS_CA``, ``LEDGER_TLS_CERT``,
    #: ``LEDGER_TLS_KEY``; none set = plaintext), so every process of a deployment picks it up; an explicit
    #: value wins (``None`` or ``ClientTls()`` = plaintext). The files are read when a LedgerClient is made.
    tls: ClientTls | None = field(default_factory=ClientTls.from_env)

    def __post_init__(self) -> None:
        for name in ("add_timeout_s", "read_timeout_s", "close_timeout_s", "recovery_timeout_s",
                     "long_poll_timeout_s"):
            _positive_number(name, getattr(self, name))
        _non_negative_number("explicit_lac_interval_s", self.explicit_lac_interval_s, "0 turns the explicit LAC off")
        if self.speculative_read_delay_s is not None:
            _positive_number("speculative_read_delay_s", self.speculative_read_delay_s,
                             hint="or None to turn speculative reads off")
        for name in ("max_inflight_adds", "max_batch_bytes", "max_entry_bytes", "read_batch_entries",
                     "read_batch_bytes", "read_ahead_batches", "metadata_retries", "io_threads"):
            _positive_int(name, getattr(self, name))
        check_batches_in_flight(self.add_batches_in_flight)
        for name in ("add_answer_runs", "framed_adds", "framed_reads"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidConfigurationError(f"{name} must be True or False, got {getattr(self, name)!r}")
        window = self.recovery_read_window
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_RECOVERY_READ_WINDOW:
            raise InvalidConfigurationError(
                f"recovery_read_window must be an integer from 1 to {MAX_RECOVERY_READ_WINDOW} (entries recovery "
                f"reads forward at once), got {window!r}")
        if self.max_entry_bytes < 128:
            raise InvalidConfigurationError(
                f"max_entry_bytes must be at least 128 (header and digest alone take up to 68), "
                f"got {self.max_entry_bytes}")
        for method in ("choose_ensemble", "replace_bookie"):
            if not callable(getattr(self.placement, method, None)):
                raise InvalidConfigurationError(
                    f"placement must implement choose_ensemble() and replace_bookie() "
                    f"(see pyspark_ledger.protocol.placement.PlacementPolicy), got {self.placement!r}")
        if isinstance(self.min_ack_quorum_zones, bool) or not isinstance(self.min_ack_quorum_zones, int) \
                or not 1 <= self.min_ack_quorum_zones <= MAX_ACK_ZONES:
            raise InvalidConfigurationError(f"min_ack_quorum_zones must be an integer in 1..{MAX_ACK_ZONES} "
                                            f"(1 = no demand), got {self.min_ack_quorum_zones!r}")
        if self.min_ack_quorum_zones > 1 and not callable(getattr(self.placement, "place_ensemble", None)):
            raise InvalidConfigurationError(
                f"min_ack_quorum_zones={self.min_ack_quorum_zones} needs a zone-aware placement "
                f"(place_ensemble() and place_replacements(), as protocol.zone_placement.ZoneAwarePlacement), "
                f"got {self.placement!r}")
        if self.placement_seed is not None and (not isinstance(self.placement_seed, int)
                                                or isinstance(self.placement_seed, bool)):
            raise InvalidConfigurationError(f"placement_seed must be an int or None, got {self.placement_seed!r}")
        if not isinstance(self.quarantine, QuarantineRule):
            raise InvalidConfigurationError(f"quarantine must be a protocol.quarantine.QuarantineRule, "
                                            f"got {self.quarantine!r}")
        if not isinstance(self.ensemble_change_backoff, ChangeBackoff):
            raise InvalidConfigurationError(f"ensemble_change_backoff must be a protocol.quarantine.ChangeBackoff, "
                                            f"got {self.ensemble_change_backoff!r}")
        if self.repair_key_file is not None and (not isinstance(self.repair_key_file, str)
                                                 or not self.repair_key_file):
            raise InvalidConfigurationError(
                f"repair_key_file must be the path of the repair key file or None, got {self.repair_key_file!r}")
        if self.tls is not None and not isinstance(self.tls, ClientTls):
            raise InvalidConfigurationError(f"tls must be a pyspark_ledger.security.tls.ClientTls or None, "
                                            f"got {self.tls!r}")
        if not isinstance(self.delay_ensemble_change, bool):
            raise InvalidConfigurationError(
                f"delay_ensemble_change must be True or False, got {self.delay_ensemble_change!r}")


def _positive_number(name: str, value: object, hint: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        extra = f" ({hint})" if hint else ""
        raise InvalidConfigurationError(f"{name} must be a number of seconds > 0{extra}, got {value!r}")


def _non_negative_number(name: str, value: object, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise InvalidConfigurationError(f"{name} must be a number of seconds >= 0 ({hint}), got {value!r}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfigurationError(f"{name} must be a positive integer, got {value!r}")
