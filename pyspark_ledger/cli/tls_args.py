"""The CLI's TLS settings: global ``--tls-ca --tls-cert --tls-key`` (defaults ``LEDGER_TLS_*``), shared by every
command that talks to bookies, and the ``ClientConfig`` made of them."""
from __future__ import annotations

import argparse
import os

from pyspark_ledger.security.tls import ENV_CA, ENV_CERT, ENV_KEY

#: How errors name the settings: the flag, with the variable that gives its default.
NAMES = (f"--tls-ca/{ENV_CA}", f"--tls-cert/{ENV_CERT}", f"--tls-key/{ENV_KEY}")


def add_tls_args(parser: argparse.ArgumentParser, default=None) -> None:
    """The three TLS flags; their defaults are the environment's unless ``default`` is given (e.g. SUPPRESS)."""
    def env(name):
        return (os.environ.get(name) or None) if default is None else default

    parser.add_argument("--tls-ca", default=env(ENV_CA), metavar="FILE",
                        help=f"PEM of the CA that signed the bookies' certificates: connect with TLS "
                             f"(default: ${ENV_CA}; none = plaintext)")
    parser.add_argument("--tls-cert", default=env(ENV_CERT), metavar="FILE",
                        help=f"this client's PEM certificate, for bookies that require one (mutual TLS); "
                             f"needs --tls-key (default: ${ENV_CERT})")
    parser.add_argument("--tls-key", default=env(ENV_KEY), metavar="FILE",
                        help=f"the PEM private key of --tls-cert, mode 0600 (default: ${ENV_KEY})")


def client_tls(args: argparse.Namespace):
    """The ``ClientTls`` of the command line (disabled when no flag or variable is set)."""
    from pyspark_ledger.security.tls import ClientTls

    return ClientTls(getattr(args, "tls_ca", None), getattr(args, "tls_cert", None), getattr(args, "tls_key", None),
                     names=NAMES)


def client_config(args: argparse.Namespace):
    """The ``ClientConfig`` of commands that talk to bookies: the defaults, with the command line's TLS and,
    for administrative commands, ``--repair-key``; for commands that place bookies, ``--min-ack-quorum-zones``."""
    from pyspark_ledger.client.config import ClientConfig

    return ClientConfig(tls=client_tls(args), repair_key_file=getattr(args, "repair_key", None) or None,
                        min_ack_quorum_zones=getattr(args, "min_ack_quorum_zones", 1))
