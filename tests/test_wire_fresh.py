"""The committed generated wire modules must equal what tools/generate_proto.py produces now."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytest.importorskip("grpc_tools")


def _load_generator():
    spec = importlib.util.spec_from_file_location("generate_proto", ROOT / "tools" / "generate_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_modules_are_fresh(tmp_path):
    generator = _load_generator()
    generator.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated, "the generator produced nothing"
    for relative in generated:
        committed = ROOT / relative
        assert committed.exists(), f"{relative} is generated but not committed: run tools/generate_proto.py"
        assert committed.read_bytes() == (tmp_path / relative).read_bytes(), (
            f"{relative} is stale: run `python tools/generate_proto.py` and commit the result"
        )


def test_every_proto_has_generated_modules():
    generator = _load_generator()
    for proto in generator.proto_files():
        stem = proto.relative_to(generator.PROTO_ROOT).with_suffix("")
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            assert (ROOT / f"{stem}{suffix}").exists(), f"missing {stem}{suffix}"


def test_statuses_are_the_documented_set():
    from pyspark_ledger.wire.v1 import bookie_pb2 as pb

    names = set(pb.Status.keys())
    assert names == {
        "STATUS_UNSPECIFIED", "OK", "NO_SUCH_LEDGER", "NO_SUCH_ENTRY", "FENCED", "UNAUTHORIZED",
        "READ_ONLY", "TOO_MANY_REQUESTS", "BAD_REQUEST", "IO_ERROR",
    }
    assert pb.STATUS_UNSPECIFIED == 0, "a missing status must never read as OK"
