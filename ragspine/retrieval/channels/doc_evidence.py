"""Document-level evidence for chunk ranking: a chunk is scored with its whole document too.

A chunk of a few hundred characters holds only part of the vocabulary its document uses for its subject,
so chunk-only BM25 ranks a lone chunk of an unrelated document that happens to repeat one query term above
a chunk of the document that is about the query. Passage retrieval has long combined the two levels of
evidence; here each document gets one BM25 entry (its own statistics: N = documents, avgdl over
documents) built from the *indexed* chunks of that document, and a chunk's lexical ranking score is

    (1 - w) * chunk_bm25 / best_chunk_bm25  +  w * doc_bm25 / best_doc_bm25

with both maxima taken over the query's hits, so the two scales meet. A document in the document top-k
whose chunks all missed the chunk top-k is represented by its best-scoring chunk. Results stay chunks
(text, chunk_id and locator are the chunk's); only the order changes.

Isolation: a document's entry is made from the chunks the retriever indexed, and RESTRICTED chunks are
never indexed, so a RESTRICTED chunk's words never reach a document entry (a document with a RESTRICTED
part is scored on its open chunks only). Filters: the document ranking is restricted to documents with a
candidate chunk and a representative is chosen among candidates only, so a filter still only narrows.

The document's tokens are the index text of its first chunk (with a contextual header, the header once)
followed by the plain text of every further chunk, in ``seq`` order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ragspine.retrieval.channels.base import Ranking
from ragspine.retrieval.channels.inverted_index import InvertedIndex
from ragspine.retrieval.chunking.types import Chunk
from ragspine.retrieval.text.tokenizer import tokenize

__all__ = ["DocumentEvidence", "DocumentEvidenceChannel", "combine_scores"]


def combine_scores(
    chunk_hits: list[tuple[str, float]],
    doc_of: Mapping[str, str],
    doc_hits: Mapping[str, float],
    weight: float,
) -> dict[str, float]:
    """The combined score of each chunk in ``chunk_hits`` (max-normalised chunk and document scores mixed
    with ``weight`` on the document). Chunks whose document has no hit get the chunk share only."""
    best_chunk = max((s for _, s in chunk_hits), default=0.0) or 1.0
    best_doc = max(doc_hits.values(), default=0.0) or 1.0
    return {
        cid: (1.0 - weight) * score / best_chunk + weight * doc_hits.get(doc_of[cid], 0.0) / best_doc
        for cid, score in chunk_hits
    }


class DocumentEvidence:
    """One BM25 entry per document, kept in step with the chunks a ``HybridRetriever`` indexes."""

    def __init__(self, *, k1: float, b: float) -> None:
        self._index = InvertedIndex(k1=k1, b=b)
        self._members: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._index)

    def members(self, doc_id: str) -> frozenset[str]:
        """Chunk ids of ``doc_id`` that contribute to its entry."""
        return frozenset(self._members.get(doc_id, ()))

    def refresh(
        self, chunks: Mapping[str, Chunk], changed: Iterable[Chunk], index_text: Callable[[Chunk], str]
    ) -> None:
        """Rebuild the entries of the documents of ``changed`` from ``chunks`` (the indexed chunks now):
        a changed chunk still in ``chunks`` is a member, one no longer there is dropped."""
        docs: set[str] = set()
        for c in changed:
            docs.add(c.doc_id)
            group = self._members.setdefault(c.doc_id, set())
            if c.chunk_id in chunks:
                group.add(c.chunk_id)
            else:
                group.discard(c.chunk_id)
        entries: list[tuple[str, list[str]]] = []
        for doc_id in sorted(docs):
            ordered = sorted((chunks[cid] for cid in self._members[doc_id]), key=lambda c: c.seq)
            if not ordered:
                del self._members[doc_id]
                self._index.remove(doc_id)
                continue
            tokens = tokenize(index_text(ordered[0]))
            for c in ordered[1:]:
                tokens.extend(tokenize(c.text))
            entries.append((doc_id, tokens))
        if entries:
            self._index.add_many(entries)

    def blend(
        self,
        lex: InvertedIndex,
        tokens: list[str],
        hits: list[tuple[str, float]],
        chunks: Mapping[str, Chunk],
        candidates: list[str] | None,
        k: int,
        weight: float,
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """(chunk hits with raw BM25 scores, the blended score of each), or ``(hits, {})`` when no
        document matches.

        ``hits`` are the chunk index's top-k for ``tokens`` over ``candidates`` (None = every chunk); a
        document in the document top-k with no chunk among them adds its best-scoring candidate chunk.
        """
        allowed = None
        if candidates is not None:
            allowed = self._index.mask({chunks[cid].doc_id for cid in candidates})
        doc_hits = dict(self._index.search(tokens, k, allowed=allowed))
        if not doc_hits:
            return hits, {}
        covered = {chunks[cid].doc_id for cid, _ in hits}
        missing = [d for d in doc_hits if d not in covered]
        extra: list[tuple[str, float]] = []
        if missing:
            pool = set(candidates) if candidates is not None else None
            ids = [
                cid
                for d in missing
                for cid in sorted(self._members.get(d, ()))
                if pool is None or cid in pool
            ]
            best: dict[str, tuple[float, str]] = {}
            for cid, score in zip(ids, lex.score_keys(tokens, ids) if ids else [], strict=True):
                doc_id = chunks[cid].doc_id
                if doc_id not in best or (-score, cid) < (-best[doc_id][0], best[doc_id][1]):
                    best[doc_id] = (score, cid)
            extra = [(cid, score) for score, cid in best.values()]
        all_hits = hits + extra
        doc_of = {cid: chunks[cid].doc_id for cid, _ in all_hits}
        return all_hits, combine_scores(all_hits, doc_of, doc_hits, weight)

    def rerank(
        self,
        lex: InvertedIndex,
        tokens: list[str],
        hits: list[tuple[str, float]],
        chunks: Mapping[str, Chunk],
        candidates: list[str] | None,
        k: int,
        weight: float,
    ) -> tuple[list[tuple[str, float]], list[str]]:
        """(chunk hits with raw BM25 scores, chunk ids in combined order, at most ``k``); see ``blend``."""
        all_hits, combined = self.blend(lex, tokens, hits, chunks, candidates, k, weight)
        if not combined:
            return hits, [cid for cid, _ in hits]
        return all_hits, sorted(combined, key=lambda cid: (-combined[cid], cid))[:k]


class DocumentEvidenceChannel:
    """The document-evidence channel: chunks ranked by the blend of their own BM25 score and their whole
    document's (``combine_scores``), over the chunk index ``lex`` and the document entries ``docs``.

    ``rank`` answers the blended scores; ``reorder`` re-orders hits the chunk index already found (the
    BM25 channel's path, which keeps the raw chunk scores as its reported ``bm25``).
    """

    name = "doc_evidence"

    def __init__(
        self, lex: InvertedIndex, chunks: Mapping[str, Chunk], *, k1: float, b: float, weight: float
    ) -> None:
        if not 0 < weight < 1:
            raise ValueError(f"document evidence weight must be in (0, 1), got {weight!r}")
        self.lex = lex
        self.chunks = chunks
        self.weight = float(weight)
        self.docs = DocumentEvidence(k1=k1, b=b)

    def refresh(self, changed: Iterable[Chunk], index_text: Callable[[Chunk], str]) -> None:
        """Bring the entries of the documents of ``changed`` up to the chunk table."""
        self.docs.refresh(self.chunks, changed, index_text)

    def encode(self, query: str) -> list[str]:
        return tokenize(query)

    def reorder(
        self, tokens: list[str], hits: list[tuple[str, float]], candidates: list[str] | None, k: int
    ) -> tuple[list[tuple[str, float]], list[str]]:
        """(chunk hits with raw BM25 scores, chunk ids in blended order, at most ``k``) for the chunk
        index's top-k ``hits`` of ``tokens`` over ``candidates`` (None = every chunk)."""
        return self.docs.rerank(self.lex, tokens, hits, self.chunks, candidates, k, self.weight)

    def rank(self, query: list[str], candidates: Sequence[str] | None, k: int) -> Ranking:
        pool = None if candidates is None else list(candidates)
        allowed = None if pool is None else self.lex.mask(pool)
        keys, scores = self.lex.search_columns(query, k, allowed=allowed)
        hits = list(zip(keys, scores, strict=True))
        _, combined = self.docs.blend(self.lex, query, hits, self.chunks, pool, k, self.weight)
        if not combined:  # no document matched: the chunk scores alone, max-normalised as in the blend
            best = max((s for _, s in hits), default=0.0) or 1.0
            return [(cid, (1.0 - self.weight) * score / best) for cid, score in hits]
        order = sorted(combined, key=lambda cid: (-combined[cid], cid))[:k]
        return [(cid, combined[cid]) for cid in order]
