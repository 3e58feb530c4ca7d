"""The ``ragspine`` console script. Each subcommand lives in its own module with ``register(subparsers)``.

A subcommand module exposes ``register(sub: argparse._SubParsersAction) -> None``; the parser it adds must
set ``func=<callable(args) -> int>`` via ``set_defaults``. Heavy imports happen inside ``func`` so that
``ragspine --help`` stays fast and works without optional extras.

Errors print one line, ``ragspine <command>: error: <what to do>``, and exit 2 for a usage error (bad
argument, missing file, a request the server refused as invalid) or 1 for a runtime failure (server
unreachable, unknown library, permission); ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence

# Subcommand modules, in the order ``--help`` lists them.
_COMMAND_MODULES = (
    "ragspine.cli.serve_cmd",
    "ragspine.cli.ingest_cmd",
    "ragspine.cli.query_cmd",
    "ragspine.cli.eval_cmd",
    "ragspine.cli.demo_cmd",
    "ragspine.cli.facts_cmd",
    "ragspine.cli.graph_cmd",
    "ragspine.cli.reindex_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragspine", description="RAGSpine retrieval service and tools.")
    parser.add_argument("--log-level", default="WARNING", help="logging level (DEBUG, INFO, WARNING, ERROR)")
    parser.add_argument(
        "--debug", action="store_true", help="print the full traceback of an error (accepted anywhere)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def error_exit(command: str, exc: BaseException) -> int:
    """Print ``exc`` as one actionable line; 2 for a usage error (bad input), 1 for a runtime failure."""
    usage = isinstance(exc, ValueError | FileNotFoundError)
    message = _one_line(str(exc))
    expected: tuple[type[BaseException], ...] = (ValueError, OSError, LookupError, RuntimeError)
    try:
        import grpc

        from ragspine_client.errors import InvalidArgument, RagspineError
    except ModuleNotFoundError:  # the library-only install has neither
        pass
    else:
        expected = (*expected, RagspineError, grpc.RpcError)
        if isinstance(exc, RagspineError):
            usage = isinstance(exc, InvalidArgument)
            message = _one_line(exc.details)
        elif isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
            usage = exc.code() == grpc.StatusCode.INVALID_ARGUMENT
            message = f"{exc.code().name}: {_one_line(exc.details() or '')}"
    if not isinstance(exc, expected) or not message:
        # An unexpected failure: name it, and say how to see more.
        message = f"{type(exc).__name__}: {message} (run with --debug for the traceback)"
    print(f"ragspine {command}: error: {message}", file=sys.stderr)
    return 2 if usage else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
        return error_exit(args.command, exc)


if __name__ == "__main__":
    raise SystemExit(main())
