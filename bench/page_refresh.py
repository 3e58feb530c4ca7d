"""The first page query after a write: the in-memory page index brought up to date from the changed pages
only, against loading every stored page again (what every write cost before row stamps), same run.

    .venv/bin/python bench/page_refresh.py [--pages 2000 --patches 192 --doc-pages 10 --rounds 5 --k 10]

A float16 ``VisualPageStore`` file holds ``--pages`` synthetic pages (unit 128-d vectors, ``patches // 2 ..
patches`` per page, documents of ``--doc-pages`` pages). Two ``LibraryPages`` over that file serve queries:

- ``changes``: the store as shipped (``changes_since``): a refresh reads the changed rows' vectors and the
  keys of the others, drops what was deleted and extends the scoring matrix;
- ``reload``: the same store with ``changes_since`` hidden, so every refresh loads every page again and
  rebuilds the matrix (the earlier behaviour, still the fallback for a store without row stamps).

Each round a third connection (another process, as far as the two readers can tell) replaces one document
with new vectors and deletes another; then each reader answers one query, timed on the wall clock from the
call to the leads. Both must return the same leads as a fresh index over the file. The load average is
printed (the machine may be shared).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import SeededQueries, alternating, pages_parser, set_math_threads

set_math_threads(1, override=False)

import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragspine.retrieval.visual.library_pages import LibraryPages  # noqa: E402
from ragspine.retrieval.visual.page_index import VisualPageIndex  # noqa: E402
from ragspine.retrieval.visual.page_store import VisualPageStore  # noqa: E402
from ragspine.retrieval.visual.pages import PageRecord  # noqa: E402

LIBRARY = "bench"


class WithoutChanges:
    """A page store with ``changes_since`` hidden: readers fall back to loading every page."""

    def __init__(self, store: VisualPageStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "changes_since":
            raise AttributeError(name)
        return getattr(self._store, name)


def _blocks(rng: np.random.Generator, n: int, patches: int) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        block = rng.standard_normal((int(rng.integers(patches // 2, patches + 1)), 128)).astype(np.float32)
        out.append(block / np.linalg.norm(block, axis=1, keepdims=True))
    return out


def _timed(pages: LibraryPages, query: str, k: int) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    leads = pages.index().search(query, k=k)
    return time.perf_counter() - t0, leads


def _matrix_mb(pages: LibraryPages) -> float:
    """MB held by the reader's scoring matrix (rows, spare capacity and offsets)."""
    held = pages.index()._matrix
    return 0.0 if held is None else held[1].nbytes / 1e6


def run(n_pages: int, patches: int, doc_pages: int, rounds: int, k: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    encoder = SeededQueries(128, 20)
    n_docs = max(2, n_pages // doc_pages)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pages.sqlite"
        writer = VisualPageStore(path)
        records = [
            PageRecord(f"d{i // doc_pages}", i % doc_pages + 1, image=None, library=LIBRARY)
            for i in range(n_docs * doc_pages)
        ]
        writer.put_pages(records, _blocks(rng, len(records), patches), encoder=encoder.name)
        changes = LibraryPages(LIBRARY, VisualPageStore(path), encoder)  # type: ignore[arg-type]
        reload = LibraryPages(LIBRARY, WithoutChanges(VisualPageStore(path)), encoder)  # type: ignore[arg-type]
        for reader in (changes, reload):  # both serving, matrices built
            reader.index().search("warm up", k=k)
        built_mb = _matrix_mb(changes)
        timings: dict[str, list[float]] = {"changes": [], "reload": []}
        refreshed: list[int] = []
        mismatches = 0
        for r in range(rounds):
            doc = f"d{r % n_docs}"
            replaced = [PageRecord(doc, p, image=None, library=LIBRARY) for p in range(1, doc_pages + 1)]
            writer.replace_doc(
                doc,
                replaced,
                dict(zip(range(1, doc_pages + 1), _blocks(rng, doc_pages, patches), strict=True)),
                encoder=encoder.name,
                library=LIBRARY,
            )
            writer.delete_doc(f"d{n_docs - 1 - r % n_docs}", library=LIBRARY)
            query = f"query {r}"
            for name, reader in alternating((("changes", changes), ("reload", reload)), r):
                seconds, leads = _timed(reader, query, k)
                timings[name].append(seconds)
                fresh = VisualPageIndex(VisualPageStore(path), encoder, device="cpu")  # type: ignore[arg-type]
                mismatches += leads != fresh.search(query, k=k)
            refreshed.append(changes.last_refreshed)
        stored = len(writer.load(with_vectors=False))
        final_mb = _matrix_mb(changes)
    ratios = [b / a for a, b in zip(timings["changes"], timings["reload"], strict=True)]
    return {
        "pages_stored": stored,
        "patches_per_page_max": patches,
        "rounds": rounds,
        "changes_first_query_ms": 1000 * statistics.median(timings["changes"]),
        "reload_first_query_ms": 1000 * statistics.median(timings["reload"]),
        "median_speedup": statistics.median(ratios),
        # The first write after the build is the one a growing single buffer paid a whole copy for.
        "changes_first_write_ms": 1000 * timings["changes"][0],
        "matrix_mb_built": built_mb,
        "matrix_mb_after_writes": final_mb,
        "pages_read_per_refresh": statistics.median(refreshed),
        "queries_with_different_leads": mismatches,
        "load": os.getloadavg()[0],
    }


def main() -> int:
    parser = pages_parser(__doc__, pages=2000, patches=192)
    parser.add_argument("--doc-pages", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if min(args.pages, args.patches, args.doc_pages, args.rounds, args.k) < 1:
        raise SystemExit("--pages, --patches, --doc-pages, --rounds and --k must be at least 1")
    print(f"writing {args.pages} pages ...", file=sys.stderr, flush=True)
    out = run(args.pages, args.patches, args.doc_pages, args.rounds, args.k)
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"{out['pages_stored']} pages stored, {out['rounds']} rounds (one document replaced, one deleted"
        f" each); load {out['load']:.2f}"
    )
    print(
        f"  first query after a write, refreshed from the changes : {out['changes_first_query_ms']:8.1f} ms"
    )
    print(
        f"  first query after a write, every page loaded again     : {out['reload_first_query_ms']:8.1f} ms"
    )
    print(
        f"  the first of them (the first write after the build)     : {out['changes_first_write_ms']:8.1f} ms"
    )
    print(
        f"  scoring matrix: {out['matrix_mb_built']:.1f} MB built, {out['matrix_mb_after_writes']:.1f} MB"
        " after the writes"
    )
    print(
        f"  median speed-up {out['median_speedup']:.1f}x; pages read per refresh "
        f"{out['pages_read_per_refresh']:.0f}; queries with different leads "
        f"{out['queries_with_different_leads']}"
    )
    return 1 if out["queries_with_different_leads"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
