"""``ragspine demo``: the main job on the embedded default, end to end, in one command.

Ingests the bundled sample corpus into a SQLite store under the data dir (CPU, packaged models when the
models extra is installed), asks a few English and Chinese questions and prints cited snippets; when the
evaluation data sits beside the repository it also runs the SciFact evaluation.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

DEMO_QUESTIONS = (
    "How much does the Harvest Arm H2 weigh and what does it pick?",
    "What happens when a person enters the safety zone of the harvest arm?",
    "board restructuring layoffs",
    "第三季度营收为什么下滑？",
    "工厂安全事故",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="ingest the bundled sample corpus, ask a few questions, print cited snippets",
        description="Run the main job on the embedded default: SQLite store, CPU, packaged models.",
    )
    p.add_argument("--data-dir", default=None, help="where the SQLite store goes (default RAGSPINE_DATA_DIR)")
    p.add_argument("--top-k", type=int, default=3, help="snippets per question (default 3)")
    p.add_argument(
        "--eval-data",
        default=None,
        help="BEIR folder to evaluate after the demo (default: ../shared/data/scifact when present)",
    )
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation step")
    p.set_defaults(func=run)


def _print_snippet(rank: int, s: dict[str, Any]) -> None:
    body = " ".join(s["text"].split())
    print(f"  [{rank}] {s['title'] or s['doc_id']}  ({s['source_locator']}, {s['sensitivity']})")
    print(textwrap.indent(textwrap.fill(body[:300], width=100), "      "))
    scores = ", ".join(f"{k}={v:.4f}" for k, v in s["scores"].items())
    print(f"      scores: {scores}")


def _default_eval_data() -> Path | None:
    env = os.environ.get("RAGSPINE_SHARED_DATA")
    root = Path(env) if env else Path.cwd().parent / "shared" / "data"
    candidate = root / "scifact"
    return candidate if candidate.is_dir() else None


def run(args: argparse.Namespace) -> int:
    from ragspine.eval.harness import run_eval
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
    from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever
    from ragspine.samples import sample_documents
    from ragspine.settings import Settings

    settings = Settings.from_env(data_dir=args.data_dir)
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    db = data_dir / "demo.db"
    print(f"RAGSpine demo — store {db} (SQLite), retrieval mode {settings.retrieval_mode}")
    with ChunkStore(db) as store:
        store.init_schema()
        index = assemble_index(store, settings)
        backend = index.embedding_backend
        print(f"embedding: {type(backend).__name__ if backend is not None else 'none (pure BM25 + RRF)'}")
        docs = sample_documents()
        written = index.ingest_many(docs)
        restricted = sum(1 for _, m in docs if m.sensitivity.upper() == "RESTRICTED")
        print(
            f"ingested {len(docs)} sample documents ({restricted} RESTRICTED), {written} new chunks, "
            f"{store.count()} active chunks\n"
        )
        retriever = NarrativeIndexRetriever(index)
        for question in DEMO_QUESTIONS:
            report = retriever.retrieve_report(question, top_k=args.top_k)
            flags = f"  [degraded: {', '.join(report.degraded)}]" if report.degraded else ""
            print(f"Q: {question}{flags}")
            if not report.snippets:
                print("  (no evidence found)")
            for rank, snippet in enumerate(report.snippets, 1):
                _print_snippet(rank, snippet)
            print()
    if args.no_eval:
        return 0
    eval_dir = Path(args.eval_data) if args.eval_data else _default_eval_data()
    if eval_dir is None:
        print("evaluation skipped: no ../shared/data/scifact beside the repository (pass --eval-data DIR)")
        return 0
    print(f"evaluating on {eval_dir} (BM25 and the configured mode) ...")
    for mode in dict.fromkeys(["bm25", settings.retrieval_mode]):
        mode_settings = Settings.from_env(retrieval_mode=mode)

        def make_index(store: ChunkStore, ms: Settings = mode_settings) -> NarrativeIndex:
            return assemble_index(store, ms, max_chars=1_000_000)

        result = run_eval(
            eval_dir,
            make_index=make_index,
            mode=mode,
            progress=sys.stderr.isatty(),
        )
        print(result.as_text())
    return 0
