"""The one check every secret or settings file passes where it enters (``pyspark_ledger.private_files``)."""
import os

import pytest

from pyspark_ledger.private_files import read_checked_file


class Refused(Exception):
    pass


def read(path, private=True, limit=100):
    return read_checked_file(str(path), f"--thing {path}", limit=limit, error=Refused, private=private)


def test_a_private_file_is_read(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"s3cret")
    path.chmod(0o600)
    assert read(path) == b"s3cret"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o601])
def test_any_group_or_other_bit_refuses_a_secret_and_names_the_fix(tmp_path, mode):
    path = tmp_path / "secret"
    path.write_bytes(b"s3cret")
    path.chmod(mode)
    with pytest.raises(Refused, match=rf"^--thing .*: a secret readable by group or others \(mode {mode:04o}\); "
                                      rf"run: chmod 600 {path}$"):
        read(path)
    assert read(path, private=False) == b"s3cret"  # a certificate may be world-readable


def test_missing_directory_fifo_and_oversized_files_are_refused(tmp_path):
    with pytest.raises(Refused, match=r"^--thing .*missing: cannot read it \(No such file"):
        read(tmp_path / "missing")
    with pytest.raises(Refused, match="not a regular file"):
        read(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(Refused, match="not a regular file"):  # and does not block on open
        read(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    big.chmod(0o600)
    with pytest.raises(Refused, match="101 bytes, over the limit of 100"):
        read(big)
    assert read(big, limit=101) == b"x" * 101
