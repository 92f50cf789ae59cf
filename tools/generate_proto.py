"""Regenerate the committed gRPC/protobuf modules from proto/.

Run ``python tools/generate_proto.py`` after editing a .proto file. The test
``tests/test_wire_fresh.py`` fails when the committed modules differ from what
this script produces, so the two never drift apart.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def proto_files() -> list[pathlib.Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: pathlib.Path) -> None:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py for every proto into out_dir."""
    from grpc_tools import protoc  # imported late: only needed by developers

    for proto in proto_files():
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(proto),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
