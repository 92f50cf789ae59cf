"""TLS settings where they enter: files checked with errors naming the setting; the client config's default;
the one-line explanations of a TLS mismatch. Certificates are made at test time (certs.py, and trustme for an
unrelated CA)."""
from __future__ import annotations

import os
import stat

import pytest
import trustme

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.tls_errors import handshake_failure, mismatch
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.security.certs import CertificateAuthority, write_tls_files
from pyspark_ledger.security.tls import MAX_PEM_BYTES, ClientTls, ServerTls, read_pem


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_tls_files(tmp_path_factory.mktemp("tls") / "set")


def test_write_tls_files_makes_a_private_directory_and_private_keys(files):
    assert stat.S_IMODE(os.stat(files.directory).st_mode) == 0o700
    for key in (files.bookie_key, files.client_key):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    for public in (files.ca, files.bookie_cert, files.client_cert):
        assert read_pem(str(public), "x").startswith(b"-----BEGIN CERTIFICATE-----")


def test_issued_certificates_name_their_holder_and_hosts():
    from cryptography import x509

    ca = CertificateAuthority.create()
    issued = ca.issue("reader-1", hosts=["127.0.0.1", "bookie.local"])
    certificate = x509.load_pem_x509_certificate(issued.cert_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1"}
    assert set(names.get_values_for_type(x509.DNSName)) == {"bookie.local", "reader-1"}
    assert certificate.issuer == ca.certificate.subject


def test_the_working_set_gives_channel_and_server_credentials(files):
    assert ClientTls(str(files.ca), str(files.client_cert), str(files.client_key)).channel_credentials()
    assert ServerTls(str(files.bookie_cert), str(files.bookie_key), str(files.ca)).server_credentials()


def test_a_missing_file_names_the_setting(tmp_path, files):
    tls = ClientTls(str(tmp_path / "nope.pem"), names=("tlsCa", "tlsCert", "tlsKey"))
    with pytest.raises(InvalidConfigurationError, match=r"^tlsCa '.*nope.pem': cannot read it"):
        tls.channel_credentials()


def test_a_directory_is_not_a_pem_file(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="LEDGER_TLS_CA .*not a regular file"):
        ClientTls.from_env({"LEDGER_TLS_CA": str(tmp_path)}).channel_credentials()


def test_an_oversized_file_is_refused_naming_the_limit(tmp_path):
    big = tmp_path / "big.pem"
    big.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * MAX_PEM_BYTES)
    with pytest.raises(InvalidConfigurationError, match=rf"--tls-ca '.*big.pem': \d+ bytes, over the limit of "
                                                        rf"{MAX_PEM_BYTES}"):
        read_pem(str(big), "--tls-ca")


def test_a_file_that_is_not_pem_is_refused(tmp_path):
    junk = tmp_path / "ca.der"
    junk.write_bytes(b"\x30\x82\x01\x0a not pem at all")
    with pytest.raises(InvalidConfigurationError, match="tlsCa .*not a PEM file"):
        ClientTls(str(junk), names=("tlsCa", "tlsCert", "tlsKey")).channel_credentials()


def test_a_pem_without_a_certificate_is_refused(tmp_path, files):
    key_as_ca = tmp_path / "key.pem"
    key_as_ca.write_bytes(files.client_key.read_bytes())
    with pytest.raises(InvalidConfigurationError, match="tls_ca .*holds no readable certificate"):
        ClientTls(str(key_as_ca)).channel_credentials()


def test_a_key_readable_by_others_is_refused_with_the_fix(tmp_path, files):
    key = tmp_path / "client-key.pem"
    key.write_bytes(files.client_key.read_bytes())
    key.chmod(0o644)
    tls = ClientTls(str(files.ca), str(files.client_cert), str(key), names=("tlsCa", "tlsCert", "tlsKey"))
    with pytest.raises(InvalidConfigurationError, match=r"tlsKey .*readable by group or others \(mode 0644\); "
                                                        r"run: chmod 600"):
        tls.channel_credentials()


def test_a_key_of_another_certificate_is_refused(files):
    tls = ClientTls(str(files.ca), str(files.client_cert), str(files.bookie_key),
                    names=("--tls-ca", "--tls-cert", "--tls-key"))
    with pytest.raises(InvalidConfigurationError, match="--tls-key '.*bookie-key.pem' is not the key of --tls-cert"):
        tls.channel_credentials()


def test_a_server_key_of_another_certificate_is_refused(files):
    with pytest.raises(InvalidConfigurationError, match="--tls-key .* is not the key of --tls-cert"):
        ServerTls(str(files.bookie_cert), str(files.client_key)).server_credentials()


@pytest.mark.parametrize("given, missing", [("cert", "LEDGER_TLS_KEY"), ("key", "LEDGER_TLS_CERT")])
def test_a_certificate_without_its_key_names_both_settings(files, given, missing):
    environ = {"LEDGER_TLS_CERT": str(files.client_cert)} if given == "cert" else \
        {"LEDGER_TLS_KEY": str(files.client_key)}
    with pytest.raises(InvalidConfigurationError, match=f"is set but {missing} is not"):
        ClientTls.from_env(environ)


def test_a_certificate_of_another_ca_is_still_a_valid_file(tmp_path):
    other = trustme.CA()
    cert = tmp_path / "other.pem"
    key = tmp_path / "other-key.pem"
    issued = other.issue_cert("intruder")
    cert.write_bytes(issued.cert_chain_pems[0].bytes())
    issued.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    # locally consistent: only the bookie can tell it was signed by a CA it does not trust
    assert ClientTls(None, str(cert), str(key)).channel_credentials()


def test_client_config_takes_tls_from_the_environment_and_an_explicit_value_wins(monkeypatch, files):
    monkeypatch.setenv("LEDGER_TLS_CA", str(files.ca))
    monkeypatch.delenv("LEDGER_TLS_CERT", raising=False)
    monkeypatch.delenv("LEDGER_TLS_KEY", raising=False)
    assert ClientConfig().tls == ClientTls(str(files.ca), names=("LEDGER_TLS_CA", "LEDGER_TLS_CERT", "LEDGER_TLS_KEY"))
    assert ClientConfig(tls=None).tls is None
    assert ClientConfig(tls=ClientTls()).tls.enabled is False
    monkeypatch.delenv("LEDGER_TLS_CA")
    assert ClientConfig().tls.enabled is False
    with pytest.raises(InvalidConfigurationError, match="tls must be a pyspark_ledger.security.tls.ClientTls"):
        ClientConfig(tls=str(files.ca))


def test_a_ledger_client_with_an_unusable_file_fails_at_once_naming_it(tmp_path):
    from pyspark_ledger import LedgerClient

    uri = f"sqlite:///{tmp_path}/meta.db"
    with pytest.raises(InvalidConfigurationError, match="tls_ca '.*missing.pem': cannot read it"):
        LedgerClient(uri, ClientConfig(tls=ClientTls(str(tmp_path / "missing.pem"))))


def test_mismatches_are_one_line_naming_the_setting(files):
    env_plain = ClientTls.from_env({})
    server_only = ClientTls(str(files.ca), names=("tlsCa", "tlsCert", "tlsKey"))
    mutual = ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))
    said = mismatch("127.0.0.1:4000", "tls", env_plain)
    assert said == ("bookie 127.0.0.1:4000 serves TLS only; this client connects in plaintext: set LEDGER_TLS_CA "
                    "(or --tls-ca / the tlsCa option) to the CA that signed its certificate")
    assert mismatch("127.0.0.1:4000", "mtls", None).startswith("bookie 127.0.0.1:4000 serves TLS only")
    said = mismatch("b1", "mtls", server_only)
    assert "requires a client certificate (mutual TLS); this client has none: set the tlsCert option and the " \
           "tlsKey option" in said
    assert "serves plaintext only; this client connects with TLS: unset tls_ca" in mismatch("b1", "", mutual)
    assert mismatch("b1", "mtls", mutual) is None and mismatch("b1", "tls", server_only) is None
    assert mismatch("b1", "", env_plain) is None and mismatch("b1", None, mutual) is None
    for text in (mismatch("b1", "mtls", server_only), mismatch("b1", "", mutual)):
        assert "\n" not in text


def test_handshake_failures_are_explained_only_for_tls_clients(files):
    mutual = ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))
    details = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
               "(TSI_PROTOCOL_FAILURE):\nCERTIFICATE_VERIFY_FAILED")
    said = handshake_failure("b1", mutual, details)
    assert said.startswith("the TLS handshake with bookie b1 failed: check tls_ca") and "\n" not in said
    assert "closed the connection" in handshake_failure("b1", mutual, "last error: UNAVAILABLE: Socket closed")
    assert handshake_failure("b1", None, details) is None
    assert handshake_failure("b1", mutual, "Connection refused") is None
