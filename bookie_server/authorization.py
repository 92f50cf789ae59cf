"""Who may do what to a ledger on this bookie: its master key, or an administrator identity.

Every data operation (add, read, read-LAC and its long poll, write-LAC, fence) names one ledger and is
allowed when its ``master_key`` matches the key the bookie stores for that ledger (compared in constant
time), or when the caller is an *administrator*: under mutual TLS, a verified client certificate with a
name the bookie lists with ``--admin-identity`` (``peer_names`` of the call's auth context). The rule:

* a key that is given must match, from anyone (an administrator's wrong key is refused like anybody's);
* a missing key is refused, except from an administrator on a ledger the bookie stores, for reads, LAC
  reads, long polls, write-LAC, fences and recovery write-back adds (``recovery=True``); a plain add
  always needs the key (the bookie must keep a ledger's true key), and an administrator cannot create
  state for a ledger the bookie has no state for without its key;
* refusals are UNAUTHORIZED, with a message saying whether the key was missing or wrong, and carry no
  ledger state (LAC -1, no entries).

``Authority`` holds the administrator names; ``caller_is_admin`` is computed once per call (once per add
stream). The messages are built here so every operation words them alike.
"""
from __future__ import annotations

from typing import Iterable

from pyspark_ledger.security.tls import peer_names

#: the ``op`` label of the authorization metrics
OPERATIONS = ("add", "read", "fence", "read_lac", "write_lac")
_WHAT = {"add": "an add to", "read": "a read of", "fence": "a fence of", "read_lac": "a LAC read of",
         "write_lac": "a LAC write to"}


def missing_key(op: str, ledger_id: int) -> str:
    return f"{_WHAT[op]} ledger {ledger_id} needs its master key (derived from the ledger's password): refused"


def wrong_key(op: str, ledger_id: int) -> str:
    return f"master key does not match ledger {ledger_id}: {_WHAT[op]} it is refused"


def admin_cannot_create(op: str, ledger_id: int) -> str:
    return (f"{_WHAT[op]} ledger {ledger_id} without its master key: this bookie stores no ledger {ledger_id}, "
            "and even an administrator cannot create one without the key")


class Authority:
    """The administrator identities of one bookie (``--admin-identity``; empty: nobody is one)."""

    def __init__(self, admin_identities: Iterable[str] = ()) -> None:
        self.admins = frozenset(name for name in admin_identities if name)

    def caller_is_admin(self, context) -> bool:
        """Whether the call's verified client certificate names an administrator (False without mutual TLS)."""
        if not self.admins or context is None:
            return False
        try:
            names = peer_names(context.auth_context())
        except Exception:  # noqa: BLE001 - no auth context: not an administrator
            return False
        return not self.admins.isdisjoint(names)
