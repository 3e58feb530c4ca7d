"""Evaluate page retrieval on a ViDoRe-style page set: text-only, visual-only and fused, nDCG@5 / Recall@10.

A page set is a BEIR folder whose corpus entries are pages (``corpus.jsonl`` with each page's text layer,
``queries.jsonl``, ``qrels.tsv``) plus ``images/<corpus-id>.png`` and optionally ``pages.tsv``
(``corpus-id, image, pdf, page, ...``), which names each page's source document and 1-based page number so
that leads carry real page locators. Modes:

- ``text``: the configured text pipeline (BM25 by default) over each page's title + text layer;
- ``visual``: ColPali / ColQwen MaxSim over the page images (the encoder comes from settings);
- ``fused``: RRF (k=60) of the two rankings, as ``RETRIEVAL_MODE_HYBRID_VISUAL`` does in the service.
"""

from __future__ import annotations

import csv
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragspine.eval.beir import BeirDataset, load_beir
from ragspine.eval.harness import ingest_dataset
from ragspine.eval.metrics import ndcg_at_k, recall_at_k
from ragspine.retrieval.channels.fusion import rrf_fuse
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.constants import DEFAULT_RRF_K
from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
from ragspine.retrieval.visual.encoders import VisualEncoder
from ragspine.retrieval.visual.library_pages import LibraryPages
from ragspine.retrieval.visual.page_index import VisualPageIndex
from ragspine.retrieval.visual.page_store import VisualPageStore
from ragspine.retrieval.visual.pages import PageRecord, page_locator

PAGE_MODES = ("text", "visual", "fused")
RANK_DEPTH = 100  # pages kept per ranking before fusion; the metrics read at most the top 10
_EMBED_BATCH = 8  # images decoded and embedded at a time, so memory stays flat on large sets


@dataclass(frozen=True)
class PageEntry:
    """One judged page: its corpus id, image file and the (document, 1-based page) it came from."""

    corpus_id: str
    image: Path
    doc_id: str
    page: int

    @property
    def locator(self) -> str:
        return page_locator(self.doc_id, self.page)


@dataclass
class PageEvalResult:
    """Figures of one page-set evaluation; ``modes`` maps a mode to its metrics."""

    dataset: str
    pages: int
    queries: int
    visual_model: str
    modes: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def as_text(self) -> str:
        lines = [
            f"{self.dataset} [pages] pages={self.pages} queries={self.queries}"
            + (f" visual={self.visual_model}" if self.visual_model else "")
        ]
        for mode, figures in self.modes.items():
            lines.append(
                f"  {mode:<6} nDCG@5={figures['ndcg_at_5']:.4f}  Recall@10={figures['recall_at_10']:.4f}"
                f"  {figures['queries_per_s']:.1f} queries/s"
            )
        lines.extend(f"  {mode:<6} skipped: {why}" for mode, why in self.skipped.items())
        return "\n".join(lines)


def load_page_entries(folder: str | Path, dataset: BeirDataset) -> list[PageEntry]:
    """Every corpus page with its image; ``pages.tsv`` supplies document and page number when present.

    Raises ``FileNotFoundError`` naming the first corpus id whose image is missing, ``ValueError`` for a
    malformed ``pages.tsv`` row.
    """
    root = Path(folder)
    origin: dict[str, tuple[str, int, str]] = {}
    table = root / "pages.tsv"
    if table.is_file():
        with table.open("r", encoding="utf-8", newline="") as fh:
            for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
                if not row or (lineno == 1 and row[0] == "corpus-id"):
                    continue
                if len(row) < 4:
                    raise ValueError(f"{table}:{lineno}: expected corpus-id, image, pdf, page")
                try:
                    page = int(row[3])
                except ValueError:
                    raise ValueError(f"{table}:{lineno}: page {row[3]!r} is not an integer") from None
                origin[row[0]] = (Path(row[2]).stem or row[0], page, row[1])
    entries = []
    for doc in dataset.corpus:
        doc_id, page, image = origin.get(doc.doc_id, (doc.doc_id, 1, f"images/{doc.doc_id}.png"))
        path = root / image
        if not path.is_file():
            raise FileNotFoundError(f"{root}: page image {image} of corpus id {doc.doc_id!r} is missing")
        entries.append(PageEntry(doc.doc_id, path, doc_id, page))
    return entries


def _text_rankings(
    index: NarrativeIndex, queries: Sequence[tuple[str, str]]
) -> tuple[dict[str, list[str]], float]:
    ranked: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for qid, text in queries:
        seen: dict[str, None] = {}
        for result in index.retrieve(text, top_k=RANK_DEPTH, rerank=False):
            seen.setdefault(result.chunk.doc_id, None)
        ranked[qid] = list(seen)
    return ranked, time.perf_counter() - t0


def _index_pages(store_path: Path, encoder: VisualEncoder, entries: Sequence[PageEntry]) -> VisualPageIndex:
    from PIL import Image

    index = VisualPageIndex(VisualPageStore(store_path), encoder)
    for start in range(0, len(entries), _EMBED_BATCH):
        records = []
        for entry in entries[start : start + _EMBED_BATCH]:
            with Image.open(entry.image) as opened:
                image = opened.convert("RGB")
            records.append(PageRecord(doc_id=entry.doc_id, page=entry.page, image=image))
        index.add_pages(records)
    return index


def _visual_rankings(
    index: Any, entries: Sequence[PageEntry], queries: Sequence[tuple[str, str]]
) -> tuple[dict[str, list[str]], float]:
    """Rankings from ``index.search(text, k=...)``: a ``VisualPageIndex`` or ``LibraryPages``."""
    by_locator = {entry.locator: entry.corpus_id for entry in entries}
    ranked: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for qid, text in queries:
        leads = index.search(text, k=min(RANK_DEPTH, len(entries)))
        ranked[qid] = [by_locator[lead.locator] for lead in leads]
    return ranked, time.perf_counter() - t0


def _fuse(text: dict[str, list[str]], visual: dict[str, list[str]]) -> dict[str, list[str]]:
    fused = {}
    for qid in text:
        scores = rrf_fuse([text[qid], visual[qid]], k=DEFAULT_RRF_K)
        fused[qid] = sorted(scores, key=lambda cid: (-scores[cid], cid))
    return fused


def _figures(
    ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]], seconds: float
) -> dict[str, float]:
    n = len(ranked)
    return {
        "ndcg_at_5": sum(ndcg_at_k(r, qrels[q], 5) for q, r in ranked.items()) / n,
        "recall_at_10": sum(recall_at_k(r, qrels[q], 10) for q, r in ranked.items()) / n,
        "queries_per_s": n / seconds if seconds > 0 else float("inf"),
    }


def run_page_eval(
    dataset_dir: str | Path,
    *,
    make_index: Callable[[ChunkStore], NarrativeIndex],
    encoder: VisualEncoder | None,
    work_dir: str | Path | None = None,
    max_queries: int | None = None,
    page_backend: Callable[[Any, Any], Any] | None = None,
) -> PageEvalResult:
    """Score ``dataset_dir``'s judged queries in text, visual and fused modes.

    ``make_index`` builds the text index over a fresh SQLite store; ``encoder`` embeds pages and queries
    (``None`` skips the visual and fused modes, which the result names in ``skipped``). ``work_dir`` holds
    the stores (a temporary folder when None; it must not hold an earlier run's files). Raises
    ``FileNotFoundError`` / ``ValueError`` for a folder that is not a page set or has no judged query.
    ``page_backend`` (``index_backend.page_index_factory``) answers the visual queries from an external
    page index (Qdrant) that the stored pages are published to, instead of the in-process one.
    """
    dataset = load_beir(dataset_dir)
    entries = load_page_entries(dataset_dir, dataset)
    judged = dataset.judged_queries()[:max_queries] if max_queries is not None else dataset.judged_queries()
    if not judged:
        raise ValueError(f"{dataset_dir}: no query has a judgement in qrels; nothing to evaluate")
    result = PageEvalResult(
        dataset=dataset.name,
        pages=len(entries),
        queries=len(judged),
        visual_model=encoder.name if encoder else "",
    )
    with tempfile.TemporaryDirectory(prefix="ragspine-pages-") as tmp:
        root = Path(work_dir or tmp)
        text_db, page_db = root / f"{dataset.name}.text.db", root / f"{dataset.name}.pages.db"
        for path in (text_db, page_db):
            if path.exists():
                raise ValueError(f"{path} already exists; pass an empty --work-dir so the run starts clean")
        root.mkdir(parents=True, exist_ok=True)
        with ChunkStore(text_db) as store:
            store.init_schema()
            index = make_index(store)
            ingest_dataset(index, dataset)
            text, text_s = _text_rankings(index, judged)
        result.modes["text"] = _figures(text, dataset.qrels, text_s)
        if encoder is None:
            reason = "no visual embedder configured (set RAGSPINE_VISUAL_EMBEDDER and RAGSPINE_VISUAL_MODEL)"
            result.skipped = {"visual": reason, "fused": reason}
            return result
        page_index = _index_pages(page_db, encoder, entries)
        try:
            searcher: Any = page_index
            if page_backend is not None:
                external = page_backend(page_index.store, encoder)
                external.drop()  # an evaluation starts from an empty collection (another run's pages go)
                searcher = LibraryPages("", page_index.store, encoder, external=lambda _s, _e: external)
            visual, visual_s = _visual_rankings(searcher, entries, judged)
        finally:
            page_index.store.close()
        result.modes["visual"] = _figures(visual, dataset.qrels, visual_s)
        result.modes["fused"] = _figures(_fuse(text, visual), dataset.qrels, text_s + visual_s)
    return result
