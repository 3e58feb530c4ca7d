"""Copy the ragspine.v1 retrieval stubs from the services' generated code into ragspine_client/_gen.

The client distribution carries its own copy so that it needs only grpcio and protobuf. Run after
``python services/ragspine_services/gen_protos.py``:

    python clients/python/sync_stubs.py          # rewrite the copies
    python clients/python/sync_stubs.py --check  # exit 1 when a copy is stale (CI)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "services" / "ragspine_services" / "_gen"
TARGET = HERE / "ragspine_client" / "_gen"
MODULES = ("common_pb2", "retrieval_pb2", "retrieval_pb2_grpc", "structured_pb2", "structured_pb2_grpc")
HEADER = "# Copied from services/ragspine_services/_gen by clients/python/sync_stubs.py; do not edit.\n"


def render() -> dict[str, str]:
    """File name -> content of every stub copy, imports pointed at ``ragspine_client._gen``."""
    out: dict[str, str] = {"__init__.py": '"""Generated ragspine.v1 stubs (copied; see sync_stubs.py)."""\n'}
    for module in MODULES:
        for suffix in (".py", ".pyi"):
            source = SOURCE / f"{module}{suffix}"
            if source.is_file():
                text = source.read_text(encoding="utf-8").replace(
                    "ragspine_services._gen", "ragspine_client._gen"
                )
                out[f"{module}{suffix}"] = HEADER + text
    return out


def stale_files(rendered: dict[str, str]) -> list[str]:
    """Names whose copy differs from ``rendered`` (or is missing)."""
    return sorted(
        name
        for name, text in rendered.items()
        if not (TARGET / name).is_file() or (TARGET / name).read_text(encoding="utf-8") != text
    )


def main(argv: list[str]) -> int:
    rendered = render()
    if "--check" in argv:
        stale = stale_files(rendered)
        if stale:
            print(f"stale client stubs: {', '.join(stale)}; run python clients/python/sync_stubs.py")
            return 1
        return 0
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (TARGET / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
