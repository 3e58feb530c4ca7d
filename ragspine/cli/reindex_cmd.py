"""``ragspine reindex --library L``: rebuild a library's external (Qdrant) index from the store of record."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reindex",
        help="rebuild a library's Qdrant index (chunks and pages) from the store of record "
        "(RAGSPINE_INDEX_BACKEND=qdrant)",
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

    from ragspine.retrieval.pipeline.catalog import LibraryCatalog
    from ragspine.retrieval.qdrant.connection import IndexUnavailableError
    from ragspine.retrieval.reindex import reindex_library, reindex_pages
    from ragspine.settings import Settings
    from ragspine.stores.pg_libraries import library_schema
    from ragspine_services.common.errors import NotFoundError

    settings = Settings.from_env(data_dir=args.data_dir)
    catalog = LibraryCatalog(settings)
    try:
        library: Any = catalog.get(args.library)
    except NotFoundError as exc:
        raise ValueError(str(exc)) from None
    page_store: Any = None
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
        page_store = _page_store(library)
        if page_store is not None:
            pages, changed = reindex_pages(
                page_store, settings, library=args.library, name=library_schema(args.library)
            )
    except IndexUnavailableError as exc:
        print(f"ragspine reindex: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if page_store is not None:
            page_store.close()
        library.close()
    print(f"re-indexed {written} chunks of {args.library!r} into Qdrant collection {retriever.collection!r}")
    if page_store is not None:
        print(f"published {changed} changed document(s) of pages into Qdrant collection {pages.collection!r}")
    return 0


def _page_store(library: Any) -> Any:
    """The library's page store when visual retrieval is on and it has one (a PostgreSQL page table, or a
    SQLite file holding a page table); None otherwise (nothing is created)."""
    if not library.settings.visual_spec:
        return None
    if library.page_store_factory is not None:
        return library.page_store_factory()
    path = library.pages_file
    if path is None or not path.exists():
        return None
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'visual_pages'")
        if found.fetchone() is None:
            return None
    from ragspine.retrieval.visual.page_store import VisualPageStore

    return VisualPageStore(path)
