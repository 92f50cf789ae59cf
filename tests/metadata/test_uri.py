"""Metadata store URIs: accepted forms, defaults, and clear errors for bad ones."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.metadata import open_metadata_store, parse_metadata_uri
from pyspark_ledger.metadata.uri import SqliteTarget, ZooKeeperTarget


def test_sqlite_uri_with_defaults():
    target = parse_metadata_uri("sqlite:///var/lib/ledger/metadata.db")
    assert target == SqliteTarget(uri="sqlite:///var/lib/ledger/metadata.db",
                                  path="/var/lib/ledger/metadata.db", lease_seconds=10.0,
                                  poll_interval=0.5)


def test_sqlite_uri_with_parameters():
    target = parse_metadata_uri("sqlite:///tmp/m.db?lease_seconds=2.5&poll_interval=0.2")
    assert (target.path, target.lease_seconds, target.poll_interval) == ("/tmp/m.db", 2.5, 0.2)


def test_zookeeper_uri_with_several_hosts_and_chroot():
    target = parse_metadata_uri("zk://zk1:2181,zk2:2182,[::1]:2183/ledgers/prod?session_timeout=4")
    assert target == ZooKeeperTarget(uri="zk://zk1:2181,zk2:2182,[::1]:2183/ledgers/prod?session_timeout=4",
                                     hosts=(("zk1", 2181), ("zk2", 2182), ("::1", 2183)),
                                     chroot="/ledgers/prod", session_timeout=4.0)
    assert target.connect_string == "zk1:2181,zk2:2182,[::1]:2183"


def test_zookeeper_uri_defaults():
    target = parse_metadata_uri("zk://127.0.0.1")
    assert (target.hosts, target.chroot, target.session_timeout) == ((("127.0.0.1", 2181),), "", 10.0)


@pytest.mark.parametrize("uri, problem", [
    ("", "empty"),
    (None, "empty or not a string"),
    ("sqlite://relative/path.db", "absolute"),
    ("sqlite:relative.db", "relative"),
    ("sqlite:///some/dir/", "directory"),
    ("sqlite:///tmp/m.db?lease=3", "unknown parameter 'lease'"),
    ("sqlite:///tmp/m.db?lease_seconds=0", "positive"),
    ("sqlite:///tmp/m.db?poll_interval=abc", "positive"),
    ("sqlite:///tmp/m.db?lease_seconds=1&lease_seconds=2", "twice"),
    ("sqlite:///tmp/m.db?session_timeout=3", "unknown parameter"),
    ("zk:///chroot", "no ZooKeeper host"),
    ("zk://:2181/chroot", "missing host"),
    ("zk://host:notaport/x", "bad port"),
    ("zk://host:70000/x", "bad port"),
    ("zk://host:2181/x/", "must not end"),
    ("zk://host:2181/a//b", "empty"),
    ("zk://host:2181/zookeeper/x", "reserved"),
    ("zk://host:2181/x?session_timeout=-1", "positive"),
    ("zk://host:2181/x?session_timeout=nan", "positive"),
    ("zk://host:2181/x?lease_seconds=1", "unknown parameter"),
    ("zk://user@host:2181/x", "user information"),
    ("zk://host:2181/x#frag", "fragment"),
    ("etcd://host:2379/x", "unknown scheme 'etcd'"),
    ("/abs/path/metadata.db", "unknown scheme ''"),
])
def test_bad_uris_name_the_uri_the_problem_and_the_accepted_forms(uri, problem):
    with pytest.raises(InvalidConfigurationError) as caught:
        open_metadata_store(uri)
    message = str(caught.value)
    assert problem in message
    assert repr(uri) in message
    assert "sqlite:///abs/path/metadata.db" in message and "zk://host:port" in message
