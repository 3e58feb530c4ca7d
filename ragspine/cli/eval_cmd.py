"""``ragspine eval DATASET_DIR``: ingest a BEIR folder, print nDCG@10 / Recall@100 / MRR@10 / queries/s."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

# BEIR corpora are already passage-sized; chunk_document keeps each one whole below this size.
WHOLE_DOCUMENT = 1_000_000


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "eval",
        help="evaluate retrieval on a BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels.tsv)",
        description="Ingest DATASET_DIR through the public API into a fresh SQLite store, run its judged "
        "queries and print nDCG@10, Recall@100, MRR@10 and queries/s.",
    )
    p.add_argument("dataset_dir", help="folder with corpus.jsonl, queries.jsonl and qrels.tsv")
    p.add_argument(
        "--mode",
        default=None,
        help="bm25 | economy | lexical | hybrid | vector | auto (default: RAGSPINE_RETRIEVAL_MODE)",
    )
    p.add_argument(
        "--embedding", default=None, help="embedding backend for hybrid modes (default RAGSPINE_EMBEDDING)"
    )
    p.add_argument("--reranker", default=None, help="reranker: none | cross_encoder | colbert | splade")
    p.add_argument(
        "--max-chars",
        type=int,
        default=WHOLE_DOCUMENT,
        help="chunk size in characters; default: each BEIR document is one retrieval unit, as BEIR scores "
        "passages (use 480 to measure the default chunker)",
    )
    p.add_argument(
        "--chunker",
        default=None,
        help="chunker name (make_chunker / RAGSPINE_CHUNKER), e.g. default, semantic, parent_child",
    )
    p.add_argument(
        "--contextual",
        nargs="?",
        const="document",
        default=None,
        choices=("none", "header", "document"),
        help="contextual retrieval (RAGSPINE_CONTEXTUAL): 'header' prepends a header (title · entity · "
        "period · heading) to each chunk's index text; 'document' (the flag alone) also scores each chunk "
        "with its whole document (RAGSPINE_DOC_WEIGHT); the title then travels as metadata, not as a first "
        "paragraph",
    )
    p.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N judged queries")
    p.add_argument("--work-dir", default=None, help="empty folder for the SQLite store (default: a temp dir)")
    p.add_argument("--run-file", default=None, help="write a TREC run file here")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument(
        "--pages",
        action="store_true",
        help="DATASET_DIR is a page set (BEIR files + images/ + pages.tsv): print nDCG@5 / Recall@10 for "
        "text, visual and fused modes; the visual encoder comes from RAGSPINE_VISUAL_EMBEDDER / "
        "RAGSPINE_VISUAL_MODEL",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ragspine.eval.harness import run_eval
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.contextual import make_index_text_fn
    from ragspine.settings import Settings

    settings = Settings.from_env(
        retrieval_mode=args.mode,
        embedding=args.embedding,
        reranker=args.reranker,
        chunker=getattr(args, "chunker", None),
        contextual=getattr(args, "contextual", None),
    )
    if args.embedding:  # the flag beats the RAGSPINE_EMBEDDING_BACKEND alias too
        settings = dataclasses.replace(settings, embedding_backend="")
    if args.max_chars < 2:
        raise ValueError(f"--max-chars must be at least 2, got {args.max_chars}")
    extra: dict[str, Any] = {"max_chars": args.max_chars, "overlap_chars": min(80, args.max_chars // 6)}
    if getattr(args, "pages", False):
        return _run_pages(args, settings, extra)
    run_fh = open(args.run_file, "w", encoding="utf-8") if args.run_file else None  # noqa: SIM115
    try:
        result = run_eval(
            args.dataset_dir,
            make_index=lambda store: assemble_index(store, settings, **extra),
            mode=settings.retrieval_mode,
            work_dir=args.work_dir,
            max_queries=args.max_queries,
            run_file=run_fh,
            progress=not args.no_progress and sys.stderr.isatty(),
            title_in_text=make_index_text_fn(settings.contextual) is None,
        )
    finally:
        if run_fh is not None:
            run_fh.close()
    print(result.as_json() if args.json else result.as_text())
    return 0


def _run_pages(args: argparse.Namespace, settings: Any, extra: dict[str, Any]) -> int:
    from ragspine.eval.pages import run_page_eval
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.index_backend import page_index_factory
    from ragspine.retrieval.visual.factory import make_visual_encoder

    if args.run_file:
        raise ValueError("--run-file is not supported with --pages")
    encoder = make_visual_encoder(settings=settings)
    # RAGSPINE_INDEX_BACKEND=qdrant: pages are searched in a Qdrant pages collection (an unreachable Qdrant
    # fails here, never falls back to the in-process page index).
    page_backend = (
        page_index_factory(settings, library="", name="eval_pages") if encoder is not None else None
    )
    result = run_page_eval(
        args.dataset_dir,
        make_index=lambda store: assemble_index(store, settings, **extra),
        encoder=encoder,
        work_dir=args.work_dir,
        max_queries=args.max_queries,
        page_backend=page_backend,
    )
    print(result.as_json() if args.json else result.as_text())
    return 0
