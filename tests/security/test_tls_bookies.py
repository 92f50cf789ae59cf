"""Real bookie processes with TLS, certificates made at test time: who gets in, what the others are told,
and the client, the CLI and LedgerClient working over mutual TLS."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from pyspark_ledger import LedgerClient
from pyspark_ledger.client import BookieClient
from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.errors import BookieUnavailableError, LedgerError, NotEnoughBookiesError
from pyspark_ledger.security.certs import write_tls_files
from pyspark_ledger.security.tls import ClientTls
from pyspark_ledger.testing.bookies import BookieCluster, BookieProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
TLS_ENV = ("LEDGER_TLS_CA", "LEDGER_TLS_CERT", "LEDGER_TLS_KEY", "LEDGER_METADATA")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The cluster's CA and certificates (certs.py), and a client certificate of an unrelated CA (trustme)."""
    base = tmp_path_factory.mktemp("pki")
    files = write_tls_files(base / "main")
    other = trustme.CA()
    issued = other.issue_cert("intruder")
    other_cert, other_key, other_ca = base / "other.pem", base / "other-key.pem", base / "other-ca.pem"
    other_cert.write_bytes(issued.cert_chain_pems[0].bytes())
    issued.private_key_pem.write_to_path(str(other_key))
    other_key.chmod(0o600)
    other.cert_pem.write_to_path(str(other_ca))
    return {"files": files, "other_cert": str(other_cert), "other_key": str(other_key), "other_ca": str(other_ca)}


@pytest.fixture(scope="module")
def mtls(pki, tmp_path_factory):
    """Three bookies that require client certificates signed by the cluster's CA."""
    base = tmp_path_factory.mktemp("mtls")
    files = pki["files"]
    with BookieCluster(3, base, f"sqlite:///{base}/metadata.db", tls_cert=files.bookie_cert,
                       tls_key=files.bookie_key, tls_client_ca=files.ca) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def plaintext_bookie(tmp_path_factory):
    base = tmp_path_factory.mktemp("plain")
    bookie = BookieProcess(base / "bookie", f"sqlite:///{base}/metadata.db")
    bookie.start()
    try:
        yield bookie
    finally:
        bookie.stop()


def good_tls(pki) -> ClientTls:
    files = pki["files"]
    return ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


def test_a_client_with_the_right_settings_writes_and_reads_e3_qw3_qa2(mtls, pki):
    with LedgerClient(mtls.metadata_uri, ClientConfig(tls=good_tls(pki))) as client:
        assert sorted(client.bookies()) == sorted(b.bookie_id for b in mtls)
        writer = client.create_ledger(3, 3, 2, password=b"secret")
        for index in range(50):
            writer.append(b"entry-%d" % index)
        writer.close()
        entries = list(client.open_ledger(writer.ledger_id, b"secret").read(0, 49))
        assert [entry.data for entry in entries] == [b"entry-%d" % index for index in range(50)]


def test_a_plaintext_client_cannot_talk_to_tls_bookies_and_is_told_in_one_line(mtls):
    with LedgerClient(mtls.metadata_uri, ClientConfig(tls=None)) as client:
        with pytest.raises(NotEnoughBookiesError) as caught:
            client.create_ledger(3, 3, 2)
        text = one_line(caught.value)
        assert "this client connects in plaintext: set LEDGER_TLS_CA (or --tls-ca / the tlsCa option)" in text
        for bookie in mtls:
            assert f"bookie {bookie.bookie_id} serves TLS only" in text
    with BookieClient(mtls[0].address) as raw, pytest.raises(BookieUnavailableError):
        raw.info(timeout=5)  # the port itself refuses plaintext


def test_a_client_without_a_certificate_is_refused(mtls, pki):
    server_only = ClientTls(str(pki["files"].ca), names=("tlsCa", "tlsCert", "tlsKey"))
    with LedgerClient(mtls.metadata_uri, ClientConfig(tls=server_only)) as client:
        with pytest.raises(NotEnoughBookiesError) as caught:
            client.create_ledger(3, 3, 2)
        assert "requires a client certificate (mutual TLS); this client has none: set the tlsCert option and " \
               "the tlsKey option" in one_line(caught.value)
    with BookieClient(mtls[0].address, tls=server_only) as raw:  # dialed anyway: the bookie hangs up
        with pytest.raises(BookieUnavailableError) as caught:
            raw.info(timeout=5)
        assert "closed the connection: if it is up, the TLS handshake failed" in one_line(caught.value)


def test_a_certificate_signed_by_another_ca_is_refused(mtls, pki):
    intruder = ClientTls(str(pki["files"].ca), pki["other_cert"], pki["other_key"])
    with BookieClient(mtls[0].address, tls=intruder) as raw:
        with pytest.raises(BookieUnavailableError) as caught:
            raw.info(timeout=5)
        assert "check tls_ca" in one_line(caught.value) and "tls_cert" in str(caught.value)
    with LedgerClient(mtls.metadata_uri, ClientConfig(tls=intruder, add_timeout_s=5.0)) as client:
        with pytest.raises(LedgerError) as caught:
            writer = client.create_ledger(3, 3, 2)
            writer.append(b"never")
        assert "TLS handshake failed" in one_line(caught.value)


def test_a_client_that_trusts_another_ca_fails_the_handshake(mtls, pki):
    files = pki["files"]
    wrong_ca = ClientTls(pki["other_ca"], str(files.client_cert), str(files.client_key),
                         names=("--tls-ca/LEDGER_TLS_CA", "--tls-cert/LEDGER_TLS_CERT", "--tls-key/LEDGER_TLS_KEY"))
    with BookieClient(mtls[0].address, tls=wrong_ca) as raw:
        with pytest.raises(BookieUnavailableError) as caught:
            raw.info(timeout=5)
    text = one_line(caught.value)
    assert f"the TLS handshake with bookie {mtls[0].address} failed: check --tls-ca/LEDGER_TLS_CA" in text


def test_a_tls_client_cannot_talk_to_a_plaintext_bookie(plaintext_bookie, pki):
    with LedgerClient(plaintext_bookie.metadata_uri, ClientConfig(tls=good_tls(pki))) as client:
        with pytest.raises(NotEnoughBookiesError) as caught:
            client.create_ledger(1, 1, 1)
    assert (f"bookie {plaintext_bookie.bookie_id} serves plaintext only; this client connects with TLS: unset"
            in one_line(caught.value))


# --- the CLI --------------------------------------------------------------------------------------------


def ledger(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in TLS_ENV}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), clean.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "pyspark_ledger.cli.main", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, cwd=REPO_ROOT, timeout=120, stdin=subprocess.DEVNULL)


def test_the_cli_works_with_tls_flags(mtls, pki):
    files = pki["files"]
    flags = ["--metadata", mtls.metadata_uri, "--tls-ca", str(files.ca), "--tls-cert", str(files.client_cert),
             "--tls-key", str(files.client_key)]
    done = ledger(*flags, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "200")
    assert done.returncode == 0, done.stderr
    listed = ledger(*flags, "--json", "bookies")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted(row["bookie_id"] for row in rows) == sorted(b.bookie_id for b in mtls)
    assert {row["tls"] for row in rows} == {"mtls"}


def test_the_cli_takes_tls_from_the_environment(mtls, pki):
    files = pki["files"]
    env = {"LEDGER_METADATA": mtls.metadata_uri, "LEDGER_TLS_CA": str(files.ca),
           "LEDGER_TLS_CERT": str(files.client_cert), "LEDGER_TLS_KEY": str(files.client_key)}
    done = ledger("simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "100", env=env)
    assert done.returncode == 0, done.stderr
    assert ledger("bookies", env=env).returncode == 0


def test_the_cli_in_plaintext_fails_in_one_line_naming_the_setting(mtls):
    done = ledger("--metadata", mtls.metadata_uri, "simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "10")
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("ledger: error:")]
    assert len(errors) == 1, done.stderr
    assert "serves TLS only; this client connects in plaintext: set LEDGER_TLS_CA" in errors[0]


def test_the_cli_names_a_bad_tls_flag(mtls, tmp_path):
    done = ledger("--metadata", mtls.metadata_uri, "--tls-ca", str(tmp_path / "none.pem"), "simpletest")
    assert done.returncode == 2
    assert "--tls-ca/LEDGER_TLS_CA '" in done.stderr and "cannot read it" in done.stderr


# --- ledger sandbox --tls ----------------------------------------------------------------------------------


def test_ledger_sandbox_tls_starts_serves_the_cli_and_stops(tmp_path):
    import signal

    from tests.sandbox.conftest import SandboxCommand, bookie_alive

    sandbox = SandboxCommand("--tls", "--bookies", "3", "--data-dir", str(tmp_path / "sb"))
    try:
        sandbox.wait_ready()
        exports = dict(line.strip().removeprefix("export ").split("=", 1)
                       for line in sandbox.lines if line.strip().startswith("export "))
        assert set(exports) == {"LEDGER_METADATA", "LEDGER_TLS_CA", "LEDGER_TLS_CERT", "LEDGER_TLS_KEY",
                                "LEDGER_REPAIR_KEY"}
        assert "mutual TLS" in sandbox.output and '.option("tlsCa", ' in sandbox.output
        assert (tmp_path / "sb").stat().st_mode & 0o777 == 0o700
        done = ledger("simpletest", "-e", "3", "-w", "3", "-a", "2", "-n", "100", env=exports)
        assert done.returncode == 0, done.stderr
        plain = ledger("simpletest", env={"LEDGER_METADATA": exports["LEDGER_METADATA"]})
        assert plain.returncode == 1 and "serves TLS only" in plain.stderr
        assert sandbox.send(signal.SIGINT) == 0
        assert "sandbox: stopped" in sandbox.output
        assert not [pid for _id, pid in sandbox.bookies if bookie_alive(pid)]
    finally:
        sandbox.close()  # stops it, and kills any bookie it left behind, if the test failed half-way
