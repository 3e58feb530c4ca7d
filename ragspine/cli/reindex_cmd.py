"""``ragspine reindex --library L``: rebuild a library's external (Qdrant) index from the store of record."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reindex",
        help="rebuild a library's Qdrant index from the store of record (RAGSPINE_INDEX_BACKEND=qdrant)",
    )
    parser.add_argument("--library", required=True, help="library id")
    parser.add_argument(
        "--recreate",
        action="store_true",
        help="drop the library's collections first (after changing BM25 parameters or the embedding model)",
    )
    parser.add_argument("--data-dir", default=None, help="data folder of the SQLite stores")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ragspine.retrieval.qdrant.connection import IndexUnavailableError
    from ragspine.retrieval.qdrant.reindex import reindex_library
    from ragspine.settings import Settings
    from ragspine.stores.pg_libraries import library_schema
    from ragspine_services.common.errors import NotFoundError
    from ragspine_services.front.libraries import LibraryCatalog

    settings = Settings.from_env(data_dir=args.data_dir)
    catalog = LibraryCatalog(settings)
    try:
        library: Any = catalog.get(args.library)
    except NotFoundError as exc:
        raise ValueError(str(exc)) from None
    try:
        total = library.store.count(include_restricted=False)
        with tqdm(
            total=total, unit="chunk", desc=f"reindex {args.library}", file=sys.stderr, disable=None
        ) as bar:
            retriever, written = reindex_library(
                library.store,
                settings,
                library=library_schema(args.library),
                recreate=args.recreate,
                progress=bar.update,
            )
    except IndexUnavailableError as exc:
        print(f"ragspine reindex: error: {exc}", file=sys.stderr)
        return 1
    finally:
        library.close()
    print(f"re-indexed {written} chunks of {args.library!r} into Qdrant collection {retriever.collection!r}")
    return 0
