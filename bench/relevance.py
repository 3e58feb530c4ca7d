"""Does "nothing relevant" return nothing? Calibrated relevance on in-domain and off-topic queries.

For each corpus and mode (lexical = BM25; hybrid = BM25 + MiniLM, RRF) the corpus is ingested whole-document
(as ``bench/quality.py``), every query runs once through the retrieval pipeline with a ``RelevanceStage``
that keeps everything, and each threshold is then applied to the returned relevance values (the stage's
cut is exactly that: relevance never rises down the answer, so a threshold keeps a prefix).

- in-domain: SciFact queries on SciFact, CMRC 2018 (zh) queries on CMRC (lexical only: MiniLM reads no
  Chinese, so hybrid answers zh queries lexically): nDCG@10 and Recall@100 at each threshold beside
  threshold 0 (the loss), both with the answer gate (the service default: nothing when no snippet reaches
  the threshold, else the whole answer) and with the per-snippet cut (a request's ``min_relevance``), and
  the share of queries left with no answer;
- off-topic: FinanceBench queries on SciFact, SciFact queries on FinanceBench pages: the share that return
  nothing.

Calibrations side by side (``--calibrations``): ``vocab`` (the shipped one: lexical evidence = the share
of the query's idf mass the snippet holds times the share of the query's terms the library holds at all),
``idf`` (the idf share alone, the calibration before the vocabulary share) and ``flat`` (every query term
weighing the same, no vocabulary share).

Usage: python bench/relevance.py [--data ../shared/data] [--modes lexical,hybrid] [--max-queries N]
       [--calibrations vocab,idf] [--corpora scifact,financebench_pages,cmrc2018_dev]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, load_beir, pin_single_thread

pin_single_thread()

from ragspine.eval.harness import ingest_dataset  # noqa: E402
from ragspine.eval.metrics import ndcg_at_k, recall_at_k  # noqa: E402
from ragspine.retrieval.assembly import assemble_index  # noqa: E402
from ragspine.retrieval.chunking.chunk_store import ChunkStore  # noqa: E402
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex  # noqa: E402
from ragspine.retrieval.pipeline import (  # noqa: E402
    IndexLibrary,
    RelevanceStage,
    RetrievalPipeline,
    RetrieveRequest,
)
from ragspine.retrieval.pipeline import relevance as relevance_module  # noqa: E402
from ragspine.retrieval.pipeline.relevance import DEFAULT_MIN_ANSWER_RELEVANCE  # noqa: E402
from ragspine.settings import Settings  # noqa: E402

MODES = {
    "lexical": Settings(retrieval_mode="bm25"),
    "hybrid": Settings(retrieval_mode="hybrid", embedding="onnx"),
}
TOP_K = 100


@contextmanager
def index_of(dataset: Any, settings: Settings, language: str = "") -> Iterator[NarrativeIndex]:
    with tempfile.TemporaryDirectory(prefix="ragspine-rel-") as tmp, ChunkStore(Path(tmp) / "c.db") as store:
        store.init_schema()
        index = assemble_index(store, settings, max_chars=1_000_000)
        ingest_dataset(index, dataset, language=language)
        yield index


def relevances(index: NarrativeIndex, queries: list[tuple[str, str]], mode: str, calibration: str) -> dict:
    """query id → [(doc_id, relevance)] in answer order, every snippet kept."""
    pipeline = RetrievalPipeline([IndexLibrary("", index)]).with_stage(RelevanceStage(0.0), after="exit")
    saved, saved_share = relevance_module.library_idf, relevance_module.vocabulary_share
    if calibration == "flat":
        relevance_module.library_idf = lambda *a, **k: None
    elif calibration == "idf":
        relevance_module.vocabulary_share = lambda *a, **k: 1.0
    elif calibration != "vocab":
        raise ValueError(f"unknown calibration {calibration!r} (vocab, idf or flat)")
    try:
        out = {}
        for qid, text in queries:
            report = pipeline.run(RetrieveRequest(text, top_k=TOP_K, mode=mode))
            out[qid] = [(s["doc_id"], s["relevance"]) for s in report.snippets]
        return out
    finally:
        relevance_module.library_idf, relevance_module.vocabulary_share = saved, saved_share


def in_domain(runs: dict, qrels: dict, threshold: float) -> dict[str, float]:
    """nDCG@10 / Recall@100 with the answer gate (nothing when no snippet reaches ``threshold``, else the
    whole answer) and with the per-snippet cut (only snippets at or above it), and the share left empty."""
    sums = {"gate_ndcg10": 0.0, "gate_recall100": 0.0, "cut_ndcg10": 0.0, "cut_recall100": 0.0, "empty": 0.0}
    for qid, ranked in runs.items():
        cut = list(dict.fromkeys(d for d, r in ranked if r >= threshold))
        gate = list(dict.fromkeys(d for d, _ in ranked)) if cut else []
        for name, docs in (("gate", gate), ("cut", cut)):
            sums[f"{name}_ndcg10"] += ndcg_at_k(docs, qrels[qid], 10)
            sums[f"{name}_recall100"] += recall_at_k(docs, qrels[qid], 100)
        sums["empty"] += not cut
    return {k: v / len(runs) for k, v in sums.items()}


def off_topic(runs: dict, threshold: float) -> float:
    return sum(not any(r >= threshold for _, r in ranked) for ranked in runs.values()) / len(runs)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SHARED_DATA)
    ap.add_argument("--modes", default="lexical,hybrid")
    ap.add_argument("--max-queries", type=int, default=None, help="cap per query set (CMRC has 3,219)")
    ap.add_argument("--thresholds", default=f"0.1,0.15,{DEFAULT_MIN_ANSWER_RELEVANCE},0.25,0.3")
    ap.add_argument("--corpora", default="scifact,financebench_pages,cmrc2018_dev", help="corpora to ingest")
    ap.add_argument("--calibrations", default="vocab,idf", help="vocab (shipped), idf (before), flat")
    ap.add_argument("--json", action="store_true", help="one JSON line per row")
    args = ap.parse_args()
    thresholds = sorted({float(t) for t in args.thresholds.split(",")})
    sci = load_beir(args.data / "scifact")
    fin = load_beir(args.data / "financebench_pages")
    cmrc = load_beir(args.data / "cmrc2018_dev")

    def cap(queries: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return queries[: args.max_queries] if args.max_queries else queries

    sci_q, fin_q = cap(sci.judged_queries()), cap(list(fin.queries.items()))
    cmrc_q = cap(cmrc.judged_queries())
    # (corpus, language, [(query set name, queries, qrels or None for off-topic)])
    QuerySet = tuple[str, list[tuple[str, str]], dict[str, dict[str, int]] | None]
    plan: list[tuple[Any, str, list[QuerySet]]] = [
        (sci, "", [("scifact", sci_q, sci.qrels), ("financebench", fin_q, None)]),
        (fin, "", [("scifact", sci_q, None)]),
        (cmrc, "zh", [("cmrc2018", cmrc_q, cmrc.qrels)]),
    ]
    if not args.json:
        print(f"service answer gate default: {DEFAULT_MIN_ANSWER_RELEVANCE}; top_k {TOP_K}; load {load()}")
        print(
            f"{'corpus':<20}{'queries':<14}{'mode':<9}{'calib':<7}{'thr':>5} "
            f"{'gate nDCG@10':>12} {'R@100':>7} {'cut nDCG@10':>11} {'R@100':>7} {'empty':>6}"
        )
    for mode in args.modes.split(","):
        settings = MODES[mode]
        for corpus, language, sets in plan:
            if corpus.name not in args.corpora.split(","):
                continue
            if mode == "hybrid" and language == "zh":
                # MiniLM reads no Chinese: the dense channel is skipped for zh queries (same as lexical).
                continue
            t0 = time.perf_counter()
            with index_of(corpus, settings, language) as index:
                for name, queries, qrels in sets:
                    for calibration in args.calibrations.split(","):
                        runs = relevances(index, queries, mode if mode == "lexical" else "", calibration)
                        for t in [0.0, *thresholds]:
                            row: dict[str, Any] = {
                                "corpus": corpus.name,
                                "queries": name,
                                "mode": mode,
                                "calibration": calibration,
                                "threshold": t,
                                "n": len(queries),
                            }
                            if qrels is not None:
                                row.update(in_domain(runs, qrels, t))
                            else:
                                row["empty"] = off_topic(runs, t)
                            if args.json:
                                print(json.dumps(row), flush=True)
                            else:
                                nd = (
                                    f"{row['gate_ndcg10']:>12.4f} {row['gate_recall100']:>7.4f} "
                                    f"{row['cut_ndcg10']:>11.4f} {row['cut_recall100']:>7.4f}"
                                    if qrels
                                    else " " * 40
                                )
                                print(
                                    f"{corpus.name:<20}{name:<14}{mode:<9}{calibration:<7}{t:>5.2f} "
                                    f"{nd} {row['empty']:>6.3f}",
                                    flush=True,
                                )
            print(f"# {corpus.name} {mode}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
