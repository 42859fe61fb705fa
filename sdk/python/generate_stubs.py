"""Regenerates the package's gRPC stubs (src/toolmesh/v1) from the repository's proto/toolmesh/v1.

Run it whenever proto/ changes, with the grpcio-tools that
requirements-generate.txt pins:

    python -m venv /tmp/gen && /tmp/gen/bin/pip install -r sdk/python/requirements-generate.txt
    /tmp/gen/bin/python sdk/python/generate_stubs.py

`--check` regenerates into a temporary directory instead and fails, naming
the files, when the committed stubs differ (crates/system-tests/tests/python_sdk.rs runs it).
"""

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PACKAGE_DIR = HERE / "src" / "toolmesh" / "v1"
GENERATED = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    """Generates every proto/toolmesh/v1 file's stubs under `out`; returns them."""
    from grpc_tools import protoc  # imported here: only this script needs grpcio-tools

    protos = sorted(str(p) for p in (PROTO_ROOT / "toolmesh" / "v1").glob("*.proto"))
    if not protos:
        sys.exit(f"no .proto files under {PROTO_ROOT / 'toolmesh' / 'v1'}")
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        sys.exit("grpc_tools.protoc failed (its message is above)")
    return generated_in(out / "toolmesh" / "v1")


def generated_in(directory: Path) -> list[Path]:
    return sorted(p for pattern in GENERATED for p in directory.glob(pattern))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale; change nothing")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp))}
        committed = {p.name: p for p in generated_in(PACKAGE_DIR)}
        if opts.check:
            stale = sorted(
                name
                for name in fresh.keys() | committed.keys()
                if name not in fresh or name not in committed or not filecmp.cmp(fresh[name], committed[name], shallow=False)
            )
            if stale:
                sys.exit(
                    f"the stubs in {PACKAGE_DIR} are stale ({', '.join(stale)}): regenerate them with "
                    "`python sdk/python/generate_stubs.py` using the grpcio-tools sdk/python/requirements-generate.txt pins"
                )
            print(f"{len(fresh)} stubs in {PACKAGE_DIR} match proto/toolmesh/v1")
            return
        for name, path in committed.items():
            if name not in fresh:
                path.unlink()
        for name, path in fresh.items():
            (PACKAGE_DIR / name).write_bytes(path.read_bytes())
        print(f"wrote {len(fresh)} stubs to {PACKAGE_DIR}")


if __name__ == "__main__":
    main()
