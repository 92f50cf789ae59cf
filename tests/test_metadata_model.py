"""LedgerMetadata validation and its JSON form."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError, MetadataError
from pyspark_ledger.metadata.model import CLOSED, Fragment, LedgerMetadata, check_quorums

ENSEMBLE = ("b1:1", "b2:2", "b3:3")


def make(**changes):
    base = dict(ledger_id=9, ensemble_size=3, write_quorum=3, ack_quorum=2,
                fragments=(Fragment(0, ENSEMBLE),), custom_metadata={"app": b"\x00\xff"}, ctime_ms=17)
    base.update(changes)
    return LedgerMetadata(**base)


def test_json_round_trip_keeps_every_field():
    md = make(state=CLOSED, last_entry_id=11, length=99, digest_type="hmac-sha256", password_check="sha256$a$b",
              fragments=(Fragment(0, ENSEMBLE), Fragment(12, ("b4:4", "b2:2", "b3:3"))))
    assert LedgerMetadata.from_json(md.to_json()) == md


@pytest.mark.parametrize("e,qw,qa", [(2, 3, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0), (3, 3, True)])
def test_quorum_rule(e, qw, qa):
    with pytest.raises(InvalidConfigurationError):
        check_quorums(e, qw, qa)


def test_quorum_error_is_also_a_value_error():
    with pytest.raises(ValueError, match="ensemble_size >= write_quorum >= ack_quorum"):
        check_quorums(2, 3, 1)


@pytest.mark.parametrize("fragments", [
    (),
    (Fragment(1, ENSEMBLE),),
    (Fragment(0, ENSEMBLE), Fragment(0, ENSEMBLE)),
    (Fragment(0, ENSEMBLE), Fragment(5, ENSEMBLE), Fragment(4, ENSEMBLE)),
    (Fragment(0, ENSEMBLE[:2]),),
])
def test_invalid_fragments_are_refused(fragments):
    with pytest.raises(InvalidArgumentError):
        make(fragments=fragments)


def test_ensemble_for_picks_the_fragment_of_an_entry():
    md = make(fragments=(Fragment(0, ENSEMBLE), Fragment(12, ("x", "y", "z"))))
    assert md.ensemble_for(0) == ENSEMBLE
    assert md.ensemble_for(11) == ENSEMBLE
    assert md.ensemble_for(12) == ("x", "y", "z")
    first, bookies = md.fragments[1]
    assert (first, bookies) == (12, ["x", "y", "z"])


@pytest.mark.parametrize("data", [b"", b"{}", b'{"format": 99}', b"\xff"])
def test_unreadable_metadata_is_a_metadata_error(data):
    with pytest.raises(MetadataError):
        LedgerMetadata.from_json(data)


def test_importing_the_package_does_not_import_pyspark():
    code = "import sys, pyspark_ledger, pyspark_ledger.errors; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_repair_secret_is_kept_only_when_there_is_one():
    from pyspark_ledger.metadata.model import Fragment, LedgerMetadata

    plain = LedgerMetadata(7, 3, 3, 2, (Fragment(0, ("a:1", "b:1", "c:1")),))
    assert b"repair_secret" not in plain.to_json(), "metadata written before repair keys stays as it was"
    assert LedgerMetadata.from_json(plain.to_json()).repair_secret == ""
    sealed = plain.with_changes(repair_secret="x25519$0123456789abcdef$AAAA")
    assert LedgerMetadata.from_json(sealed.to_json()) == sealed
