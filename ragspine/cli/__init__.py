"""The ``ragspine`` console script. Each subcommand lives in its own module with ``register(subparsers)``.

A subcommand module exposes ``register(sub: argparse._SubParsersAction) -> None``; the parser it adds must
set ``func=<callable(args) -> int>`` via ``set_defaults``. Heavy imports happen inside ``func`` so that
``ragspine --help`` stays fast and works without optional extras.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"ragspine {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if type(exc).__name__ != "IndexUnavailableError":  # the external index is down: say so, no traceback
            raise
        print(f"ragspine {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
