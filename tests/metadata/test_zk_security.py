"""ZooKeeper credentials and TLS settings: URI parameters, the credentials file, kazoo options."""
from __future__ import annotations

import pytest
from kazoo.security import make_digest_acl

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.metadata import parse_metadata_uri
from pyspark_ledger.metadata.zk_security import AUTH_ENV, kazoo_options, resolve_credentials


def private_file(path, text: str, mode: int = 0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def test_security_parameters_are_parsed():
    target = parse_metadata_uri("zk://h:2181/c?auth_file=/etc/ledger/zk.auth&tls=1&tls_ca=/p/ca.pem"
                                "&tls_cert=/p/c.pem&tls_key=/p/k.pem&session_timeout=3")
    assert (target.auth_file, target.tls, target.tls_ca, target.tls_cert, target.tls_key,
            target.session_timeout) == ("/etc/ledger/zk.auth", True, "/p/ca.pem", "/p/c.pem",
                                        "/p/k.pem", 3.0)
    plain = parse_metadata_uri("zk://h:2181/c")
    assert (plain.auth_file, plain.tls, plain.tls_ca) == ("", False, "")


@pytest.mark.parametrize("query, problem", [
    ("auth_file=relative/zk.auth", "absolute path"),
    ("auth_file=/etc/ledger/", "absolute path"),
    ("tls=yes", "must be 0 or 1"),
    ("tls_ca=/p/ca.pem", "without tls=1"),
    ("tls=0&tls_ca=/p/ca.pem", "without tls=1"),
    ("tls=1&tls_cert=/p/c.pem", "go together"),
    ("tls=1&tls_key=/p/k.pem", "go together"),
    ("auth=user:secret", "unknown parameter 'auth'"),
])
def test_bad_security_parameters_are_named(query, problem):
    with pytest.raises(InvalidConfigurationError, match=problem):
        parse_metadata_uri(f"zk://h:2181/c?{query}")


def test_a_password_in_the_uri_is_refused_and_not_echoed():
    with pytest.raises(InvalidConfigurationError) as caught:
        parse_metadata_uri("zk://admin:hunter2@h:2181/c")
    assert "hunter2" not in str(caught.value)
    assert "LEDGER_ZK_AUTH" in str(caught.value) and "auth_file" in str(caught.value)


def test_no_credentials_means_no_acl_and_no_auth():
    target = parse_metadata_uri("zk://h:2181/c")
    assert resolve_credentials(target, environ={}) is None
    assert kazoo_options(target, None) == {}


def test_credentials_from_the_environment_give_a_digest_acl_for_them_only():
    target = parse_metadata_uri("zk://h:2181/c")
    credentials = resolve_credentials(target, environ={AUTH_ENV: "ledger:s3cret\n"})
    assert (credentials.user, credentials.password) == ("ledger", "s3cret")
    assert "s3cret" not in repr(credentials)
    options = kazoo_options(target, credentials)
    assert options["auth_data"] == [("digest", "ledger:s3cret")]
    assert options["default_acl"] == [make_digest_acl("ledger", "s3cret", all=True)]


def test_the_auth_file_wins_over_the_environment(tmp_path):
    auth = private_file(tmp_path / "zk.auth", "from-file:pw1\n")
    target = parse_metadata_uri(f"zk://h:2181/c?auth_file={auth}")
    credentials = resolve_credentials(target, environ={AUTH_ENV: "from-env:pw2"})
    assert (credentials.user, credentials.password) == ("from-file", "pw1")
    assert str(auth) in credentials.source


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o601])
def test_an_auth_file_others_may_access_is_refused_with_the_chmod_to_run(tmp_path, mode):
    auth = private_file(tmp_path / "zk.auth", "ledger:s3cret", mode)
    target = parse_metadata_uri(f"zk://h:2181/c?auth_file={auth}")
    with pytest.raises(InvalidConfigurationError) as caught:
        resolve_credentials(target, environ={})
    assert f"chmod 600 {auth}" in str(caught.value) and f"{mode:04o}" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_a_missing_auth_file_is_named(tmp_path):
    target = parse_metadata_uri(f"zk://h:2181/c?auth_file={tmp_path}/nope")
    with pytest.raises(InvalidConfigurationError, match=f"{tmp_path}/nope"):
        resolve_credentials(target, environ={})


@pytest.mark.parametrize("text", ["no-colon", ":pw", "user:", "a:b\nc:d", "   "])
def test_malformed_credentials_are_refused_without_echoing_them(text):
    target = parse_metadata_uri("zk://h:2181/c")
    with pytest.raises(InvalidConfigurationError) as caught:
        resolve_credentials(target, environ={AUTH_ENV: text})
    assert AUTH_ENV in str(caught.value) and "user:password" in str(caught.value)
    if ":" in text and text.split(":", 1)[1]:
        assert text.split(":", 1)[1] not in str(caught.value)


def test_tls_options_for_kazoo_verify_the_server(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    target = parse_metadata_uri(f"zk://h:2281/c?tls=1&tls_ca={ca}")
    options = kazoo_options(target, None)
    assert options == {"use_ssl": True, "verify_certs": True, "check_hostname": True,
                       "ca": str(ca), "certfile": None, "keyfile": None}


def test_a_missing_tls_file_is_named(tmp_path):
    target = parse_metadata_uri(f"zk://h:2281/c?tls=1&tls_ca={tmp_path}/ca.pem")
    with pytest.raises(InvalidConfigurationError, match=f"tls_ca={tmp_path}/ca.pem"):
        kazoo_options(target, None)
