"""End-to-end retrieve() throughput against bm25s' raw ``retrieve``, on SciFact, one thread, same run.

Stages, each timed over the same judged queries (top 100, or --top N for both sides):
  bm25s        bm25s.BM25.retrieve on pre-tokenised queries (the peer; our tokenizer, k1=1.5, b=0.75,
               Lucene idf), one call per query, ``n_threads=0`` (its plain single-thread path; any other
               value starts a thread pool on every call)
  bm25s_pool   the same with ``n_threads=1``, as earlier rounds of this benchmark ran it (a thread pool
               started per call): kept so older figures can be compared
  raw          our InvertedIndex.search on pre-tokenised queries
  floor        tokenising + our kernel + the least a snippet dict can be (a copy of the chunk's provenance
               fields plus a scores dict per result): what any ``list[dict]`` answer costs above the kernel,
               with no pipeline, exits, glossary or store check
  search       HybridRetriever.search (tokenising, filters, RRF, RetrievalResult objects)
  retrieve     NarrativeIndex.retrieve (store change-log check, glossary multi-query)
  snippets     NarrativeIndexRetriever.retrieve: the whole retrieval pipeline (ragspine.retrieval.pipeline:
               request, route, channels, exit #2, snippet dicts with provenance, final exit, report)
  snippets_numpy  the same with the lexical index scoring through its NumPy path instead of the compiled
               kernel (checked first to give the same snippets; absent when the package was built without
               the kernel, since every stage then runs the NumPy path)

``--breakdown`` adds what each part of the ``snippets`` stage costs inside the whole pipeline: the stage
runs again with one part replaced by a lookup of that part's own answers, computed beforehand for every
query (the lexical kernel's keys and scores, the glossary's query variants; the store's change check
answers "no change", true while nothing writes). The difference to the whole stage, per query, is that
part's marginal cost, cache misses included; "rest" is the whole stage minus those parts. Every stand-in
is checked first to give exactly the snippets the real part gives.

Rounds alternate: each round times every stage once over all queries, back to back, and each stage's
ratio to bm25s is taken within its round. The figures are the median over rounds of those per-round
ratios (and of each stage's q/s), so load from other processes on a shared machine hits ours and the peer
alike. Process CPU time is the default clock (with one thread it equals wall time on an idle machine);
``--clock wall`` measures elapsed time. The load average is printed at the start and the end.

Usage: python bench/retrieve.py [--data ../shared/data/scifact] [--mode bm25|hybrid] [--rounds 15]
       [--clock cpu|wall] [--top 100] [--breakdown] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import dataset_dir, load_beir, pin_single_thread

pin_single_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any, cast  # noqa: E402

from ragspine.eval.harness import ingest_dataset  # noqa: E402
from ragspine.retrieval.assembly import assemble_index  # noqa: E402
from ragspine.retrieval.channels.inverted_index import compiled_kernel_available  # noqa: E402
from ragspine.retrieval.chunking.chunk_store import ChunkStore  # noqa: E402
from ragspine.retrieval.indexing.text_api import query_variants  # noqa: E402
from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever  # noqa: E402
from ragspine.retrieval.text.tokenizer import tokenize  # noqa: E402
from ragspine.settings import Settings  # noqa: E402

STAGES = ("bm25s", "bm25s_pool", "raw", "floor", "search", "retrieve", "snippets", "snippets_numpy")
# --breakdown: the part a stage variant replaces, and the variant's name.
PARTS = {"kernel": "without_kernel", "store_check": "without_store_check", "glossary": "without_glossary"}
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
TOP = 100  # default depth: the judged-query evaluations read the top 100

Stage = Callable[[str, list[str]], object]


def interleaved_rounds(
    stages: dict[str, Stage],
    queries: Sequence[tuple[str, list[str]]],
    rounds: int,
    clock: Callable[[], float],
) -> list[dict[str, float]]:
    """Queries/s of every stage in each round; within a round the stages run one after the other."""
    out = []
    for _ in range(rounds):
        qps: dict[str, float] = {}
        for name, fn in stages.items():
            t0 = clock()
            for text, tokens in queries:
                fn(text, tokens)
            qps[name] = len(queries) / max(clock() - t0, 1e-9)
        out.append(qps)
    return out


def summarise(per_round: list[dict[str, float]], peer: str = "bm25s") -> dict[str, float]:
    """Median q/s per stage, and the median of each stage's per-round ratio to ``peer``."""
    figures: dict[str, float] = {}
    for name in per_round[0]:
        figures[f"{name}_qps"] = statistics.median(r[name] for r in per_round)
        ratios = [r[name] / r[peer] for r in per_round]
        figures[f"{name}_ratio"] = statistics.median(ratios)
        figures[f"{name}_ratio_min"] = min(ratios)
        figures[f"{name}_ratio_max"] = max(ratios)
        if "bm25s_pool" in per_round[0]:
            figures[f"{name}_vs_pool"] = statistics.median(r[name] / r["bm25s_pool"] for r in per_round)
    return figures


def breakdown(per_round: list[dict[str, float]]) -> dict[str, float]:
    """Median µs per query of bm25s and of the whole ``snippets`` stage, and each part's marginal µs.

    A part's marginal cost in a round is the whole stage's time minus the time of the stage with that
    part replaced; "rest" is the whole stage minus every part's marginal cost."""

    def us(qps: float) -> float:
        return 1e6 / qps

    out: dict[str, float] = {
        "bm25s_us": statistics.median(us(r["bm25s"]) for r in per_round),
        "snippets_us": statistics.median(us(r["snippets"]) for r in per_round),
    }
    rest = []
    for r in per_round:
        parts = [us(r["snippets"]) - us(r[variant]) for variant in PARTS.values()]
        rest.append(us(r["snippets"]) - sum(parts))
    for part, variant in PARTS.items():
        out[f"{part}_us"] = statistics.median(us(r["snippets"]) - us(r[variant]) for r in per_round)
    out["rest_us"] = statistics.median(rest)
    return out


class _Replaced:
    """Within ``with``, the named attributes of ``obj`` are the given stand-ins (as instance attributes;
    whatever the instance held under those names before is put back afterwards)."""

    def __init__(self, obj: object, **stand_ins: object) -> None:
        self.obj, self.stand_ins = obj, stand_ins
        self.saved: dict[str, object] = {}

    def __enter__(self) -> None:
        own = vars(self.obj)
        self.saved = {name: own[name] for name in self.stand_ins if name in own}
        for name, value in self.stand_ins.items():
            setattr(self.obj, name, value)

    def __exit__(self, *_exc: object) -> None:
        for name in self.stand_ins:
            if name in self.saved:
                setattr(self.obj, name, self.saved[name])
            else:
                delattr(self.obj, name)


class _CachedRewriter:
    """A query rewriter that looks up the variants the real one gave for each query."""

    def __init__(self, variants: dict[str, list[str]]) -> None:
        self.variants = variants

    def rewrite(self, query: str) -> list[str]:
        return self.variants[query]


def part_variants(
    index: Any, link: NarrativeIndexRetriever, queries: Sequence[tuple[str, list[str]]], top: int
) -> dict[str, Stage]:
    """The ``snippets`` stage with one part replaced by a lookup of its own answers (``--breakdown``).

    Raises ``RuntimeError`` when a stand-in changes any query's snippets."""
    retriever = index.retriever
    lex = retriever.bm25.index
    variants = {text: query_variants(retriever.query_rewriter, text) for text, _ in queries}
    kernel: dict[tuple[tuple[str, ...], int | None], tuple[list[str], list[float]]] = {}
    for text, _ in queries:
        for variant in variants[text]:
            tokens = tokenize(variant)
            kernel[(tuple(tokens), top)] = lex.search_columns(tokens, top)

    def cached_columns(
        tokens: Sequence[str], k: int | None = None, *, allowed: object = None
    ) -> tuple[list[str], list[float]]:
        return kernel[(tuple(tokens), k)]

    def no_change(*, wait: bool = True) -> int:
        return 0

    stand_ins = {
        "without_kernel": _Replaced(lex, search_columns=cached_columns),
        "without_store_check": _Replaced(index, sync=no_change),
        "without_glossary": _Replaced(retriever, query_rewriter=_CachedRewriter(variants)),
    }
    expected = {text: link.retrieve(text, top_k=top) for text, _ in queries}
    for name, replaced in stand_ins.items():
        with replaced:
            if any(link.retrieve(text, top_k=top) != expected[text] for text, _ in queries):
                raise RuntimeError(f"the {name} stand-in changed the snippets; its figure would be wrong")

    def run_with(replaced: _Replaced) -> Stage:
        def stage(text: str, _tokens: list[str]) -> object:
            with replaced:
                return link.retrieve(text, top_k=top)

        return stage

    return {name: run_with(replaced) for name, replaced in stand_ins.items()}


def numpy_kernel_stage(
    lex: Any, link: NarrativeIndexRetriever, queries: Sequence[tuple[str, list[str]]], top: int
) -> Stage:
    """The ``snippets`` stage with the lexical index on its NumPy path (``RuntimeError`` when that changes
    any query's snippets)."""
    numpy_path = _Replaced(lex, _top_kernel=None)
    expected = {text: link.retrieve(text, top_k=top) for text, _ in queries}
    with numpy_path:
        if any(link.retrieve(text, top_k=top) != expected[text] for text, _ in queries):
            raise RuntimeError("the NumPy path gave other snippets than the compiled kernel")

    def stage(text: str, _tokens: list[str]) -> object:
        with numpy_path:
            return link.retrieve(text, top_k=top)

    return stage


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="scifact", help="BEIR folder or a name under ../shared/data")
    ap.add_argument("--mode", default="bm25", help="retrieval mode for the search/retrieve/snippet stages")
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds (medians are reported)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    ap.add_argument("--top", type=int, default=TOP, help="results per query, both sides")
    ap.add_argument("--breakdown", action="store_true", help="marginal cost of each part of `snippets`")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if args.top < 1:
        raise SystemExit("--top must be at least 1")
    top = args.top
    dataset = load_beir(dataset_dir(args.data))
    queries = [(text, tokenize(text)) for _, text in dataset.judged_queries()]

    import bm25s  # benchmark-only peer

    docs_tokens = [tokenize(f"{d.title}\n\n{d.text}" if d.title else d.text) for d in dataset.corpus]
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in docs_tokens]
    peer = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    peer.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    peer_queries = {text: [vocab[t] for t in tokens if t in vocab] or [0] for text, tokens in queries}

    def peer_search(text: str, _tokens: list[str]) -> object:
        return peer.retrieve([peer_queries[text]], k=top, show_progress=False, n_threads=0)

    def peer_pool_search(text: str, _tokens: list[str]) -> object:
        return peer.retrieve([peer_queries[text]], k=top, show_progress=False, n_threads=1)

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, ChunkStore(Path(tmp) / "bench.db") as store:
        store.init_schema()
        index = assemble_index(store, Settings(retrieval_mode=args.mode), max_chars=1_000_000)
        ingest_docs_per_s = ingest_dataset(index, dataset)
        lex = index.retriever.bm25.index
        chunks = index.retriever._chunks
        link = NarrativeIndexRetriever(index)

        def floor(text: str, _tokens: list[str]) -> object:
            keys, scores = lex.search_columns(tokenize(text), top)
            out = []
            for key, score in zip(keys, scores, strict=True):
                snippet = cast("dict[str, Any]", chunks[key].snippet_fields.copy())
                snippet["scores"] = {"bm25": score, "vector": 0.0, "fused": 0.0}
                out.append(snippet)
            return out

        stages: dict[str, Stage] = {
            "bm25s": peer_search,
            "bm25s_pool": peer_pool_search,
            "raw": lambda _q, toks: lex.search(toks, top),
            "floor": floor,
            "search": lambda q, _t: index.retriever.search(q, top_k=top),
            "retrieve": lambda q, _t: index.retrieve(q, top_k=top),
            "snippets": lambda q, _t: link.retrieve(q, top_k=top),
        }
        if compiled_kernel_available():
            stages["snippets_numpy"] = numpy_kernel_stage(lex, link, queries, top)
        if args.breakdown:
            stages.update(part_variants(index, link, queries, top))
        for _ in range(2):  # warm-up: caches, first-call costs of every stage
            for fn in stages.values():
                for text, tokens in queries[:50]:
                    fn(text, tokens)
        per_round = interleaved_rounds(stages, queries, args.rounds, CLOCKS[args.clock])
    figures: dict[str, float | str | int] = {
        "dataset": dataset.name,
        "mode": args.mode,
        "queries": len(queries),
        "rounds": args.rounds,
        "top": top,
        "clock": args.clock,
        "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "ingest_docs_per_s": ingest_docs_per_s,
        "lexical_kernel": "compiled" if compiled_kernel_available() else "numpy",
        **summarise(per_round),
        **(breakdown(per_round) if args.breakdown else {}),
    }

    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    print(
        f"{dataset.name}: {len(queries)} queries, mode {args.mode}, top-{top}, 1 thread, {args.clock} clock, "
        f"median of {args.rounds} alternating rounds; load average {figures['load_start']} -> "
        f"{figures['load_end']}; lexical kernel: {figures['lexical_kernel']}"
    )
    header = f"{'stage':<14} {'queries/s':>10} {'vs bm25s':>9} {'(min-max over rounds)':>22}"
    print(f"{header} {'vs bm25s_pool':>14}")
    for stage in STAGES:
        if f"{stage}_qps" not in figures:
            continue
        print(
            f"{stage:<14} {float(figures[f'{stage}_qps']):>10.0f} {float(figures[f'{stage}_ratio']):>8.2f}x"
            f"   {float(figures[f'{stage}_ratio_min']):>9.2f}-{float(figures[f'{stage}_ratio_max']):.2f}x"
            f" {float(figures[f'{stage}_vs_pool']):>13.2f}x"
        )
    if args.breakdown:
        print(
            f"per query (median over rounds): bm25s {float(figures['bm25s_us']):.1f} µs; snippets "
            f"{float(figures['snippets_us']):.1f} µs = "
            + " + ".join(f"{part} {float(figures[f'{part}_us']):.1f}" for part in (*PARTS, "rest"))
        )
    print(f"ingest {float(figures['ingest_docs_per_s']):.0f} docs/s (chunk, store in SQLite, index)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
