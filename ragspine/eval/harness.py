"""Evaluate the retrieval pipeline on a BEIR-layout folder through the public API.

Documents are ingested with ``NarrativeIndex.ingest_many`` into a real SQLite chunk store, queries go
through the one retrieval pipeline (``ragspine.retrieval.pipeline``: the same stages, exits included, as
``NarrativeIndexRetriever`` and the gRPC front), chunk hits are collapsed to documents by their best
chunk, and nDCG@10, Recall@100, MRR@10 and queries/s are reported.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from ragspine.eval.beir import BeirDataset, load_beir
from ragspine.eval.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.types import DocumentMeta
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.pipeline import IndexLibrary, RetrievalPipeline, RetrieveRequest


@dataclass
class EvalResult:
    """Figures of one evaluation run."""

    dataset: str
    mode: str
    docs: int
    chunks: int
    queries: int
    ndcg_at_10: float
    recall_at_100: float
    mrr_at_10: float
    queries_per_s: float
    ingest_docs_per_s: float
    degraded_queries: int

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def as_text(self) -> str:
        return (
            f"{self.dataset} [{self.mode}] docs={self.docs} chunks={self.chunks} queries={self.queries}\n"
            f"  nDCG@10={self.ndcg_at_10:.4f}  Recall@100={self.recall_at_100:.4f}"
            f"  MRR@10={self.mrr_at_10:.4f}\n"
            f"  {self.queries_per_s:.1f} queries/s (retrieve(), snippets with provenance)  "
            f"ingest {self.ingest_docs_per_s:.0f} docs/s"
            + (f"\n  degraded answers: {self.degraded_queries}" if self.degraded_queries else "")
        )


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="it", file=sys.stderr, leave=False)


def ingest_dataset(
    index: NarrativeIndex,
    dataset: BeirDataset,
    *,
    progress: bool = False,
    language: str = "",
    title_in_text: bool = True,
) -> float:
    """Ingest every corpus document and warm the index; returns docs/s.

    The title is always the document's ``DocumentMeta.title``; with ``title_in_text`` it is also the
    text's first paragraph. Contextual headers already put the title in front of every chunk's index
    text, so their runs pass ``title_in_text=False`` rather than also index a title-only chunk.
    """
    bar = _progress(len(dataset.corpus), f"ingest {dataset.name}", progress)
    t0 = time.perf_counter()
    docs = (
        (
            f"{d.title}\n\n{d.text}" if d.title and title_in_text else d.text,
            DocumentMeta(doc_id=d.doc_id, title=d.title, language=language),
        )
        for d in dataset.corpus
    )
    index.ingest_many(docs, progress=bar.update if bar is not None else None)
    # Dense vectors and sparse encodings are part of indexing: compute them before queries are timed.
    index.warm()
    elapsed = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    return len(dataset.corpus) / elapsed if elapsed > 0 else float("inf")


def run_eval(
    dataset_dir: str | Path,
    *,
    make_index: Callable[[ChunkStore], NarrativeIndex],
    mode: str = "bm25",
    work_dir: str | Path | None = None,
    max_queries: int | None = None,
    top_docs: int = 100,
    run_file: TextIO | None = None,
    progress: bool = False,
    language: str = "",
    title_in_text: bool = True,
) -> EvalResult:
    """Ingest ``dataset_dir`` into a fresh store built by ``make_index`` and score its judged queries.

    ``work_dir`` holds the SQLite file (a temporary folder when None). ``run_file`` receives a TREC run
    (``qid Q0 docid rank score ragspine-<mode>``). ``title_in_text``: see ``ingest_dataset``.
    """
    dataset = load_beir(dataset_dir)
    judged = dataset.judged_queries()
    if max_queries is not None:
        judged = judged[:max_queries]
    if not judged:
        raise ValueError(f"{dataset_dir}: no query has a judgement in qrels; nothing to evaluate")
    with tempfile.TemporaryDirectory(prefix="ragspine-eval-") as tmp:
        db = Path(work_dir or tmp) / f"{dataset.name}.db"
        if db.exists():
            raise ValueError(f"{db} already exists; pass an empty --work-dir so the evaluation starts clean")
        db.parent.mkdir(parents=True, exist_ok=True)
        with ChunkStore(db) as store:
            store.init_schema()
            index = make_index(store)
            docs_per_s = ingest_dataset(
                index, dataset, progress=progress, language=language, title_in_text=title_in_text
            )
            pipeline = RetrievalPipeline([IndexLibrary("", index)])
            totals = {"ndcg": 0.0, "recall": 0.0, "mrr": 0.0}
            degraded = 0
            bar = _progress(len(judged), f"queries {dataset.name}", progress)
            elapsed = 0.0
            for qid, text in judged:
                t0 = time.perf_counter()
                report = pipeline.run(RetrieveRequest(text, top_k=top_docs * 3))
                elapsed += time.perf_counter() - t0
                degraded += bool(report.degraded)
                ranked: list[str] = []
                best: dict[str, float] = {}
                for s in report.snippets:
                    if s["doc_id"] not in best:
                        best[s["doc_id"]] = s["scores"].get("rerank", s["scores"]["fused"])
                        ranked.append(s["doc_id"])
                ranked = ranked[:top_docs]
                rel = dataset.qrels[qid]
                totals["ndcg"] += ndcg_at_k(ranked, rel, 10)
                totals["recall"] += recall_at_k(ranked, rel, 100)
                totals["mrr"] += mrr_at_k(ranked, rel, 10)
                if run_file is not None:
                    for rank, doc_id in enumerate(ranked, 1):
                        run_file.write(f"{qid} Q0 {doc_id} {rank} {best[doc_id]:.6f} ragspine-{mode}\n")
                if bar is not None:
                    bar.update(1)
            if bar is not None:
                bar.close()
            n = len(judged)
            return EvalResult(
                dataset=dataset.name,
                mode=mode,
                docs=len(dataset.corpus),
                chunks=store.count(),
                queries=n,
                ndcg_at_10=totals["ndcg"] / n,
                recall_at_100=totals["recall"] / n,
                mrr_at_10=totals["mrr"] / n,
                queries_per_s=n / elapsed if elapsed > 0 else float("inf"),
                ingest_docs_per_s=docs_per_s,
                degraded_queries=degraded,
            )
