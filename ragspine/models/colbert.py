"""ColBERT late-interaction reranking: token vectors per side, MaxSim between them.

Model: a BERT encoder plus the checkpoint's linear projection (ColBERTv2: ``linear.weight``, 768 -> 128),
token vectors L2-normalised. Query/document markers follow ColBERTv2: ``[unused0]`` ([Q]) or ``[unused1]``
([D]) right after ``[CLS]``, and queries padded with ``[MASK]`` to ``query_max_length`` (query augmentation).
Simplification: document punctuation tokens are kept (ColBERTv2 masks them); scores shift slightly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Unpack

import numpy as np

from ragspine.models.batching import run_batched
from ragspine.models.colbert_weights import load_projection
from ragspine.models.onnx_rerank_export import export_colbert
from ragspine.models.packaged import DEFAULT_COLBERT_ID
from ragspine.models.runtime import ModelReranker, RuntimeOptions, check_rerank_input
from ragspine.models.tokenization import Encoded, TextTokenizer, check_texts

QUERY_MARKER = "[unused0]"
DOC_MARKER = "[unused1]"


def maxsim(query_vectors: np.ndarray, doc_vectors: np.ndarray) -> float:
    """Late-interaction score: sum over query tokens of the best cosine with any document token.

    ``query_vectors`` (q, dim) and ``doc_vectors`` (d, dim) must already be unit length. An empty side
    scores 0.0. Raises ``ValueError`` when the dimensions differ.
    """
    if query_vectors.shape[-1] != doc_vectors.shape[-1]:
        raise ValueError(
            f"dimension mismatch: query {query_vectors.shape[-1]} vs doc {doc_vectors.shape[-1]}"
        )
    if query_vectors.shape[0] == 0 or doc_vectors.shape[0] == 0:
        return 0.0
    similarities = query_vectors @ doc_vectors.T  # (q, d)
    return float(similarities.max(axis=1).sum())


class ColBERTReranker(ModelReranker):
    """Reranker (``name == "colbert"``) scoring each passage by MaxSim against the query's token vectors.

    ``model_name_or_path``: a ColBERT checkpoint folder or Hub id (BERT weights under ``bert.*`` plus
    ``linear.weight``). Documents over ``doc_max_length`` tokens are cut and counted in ``truncated``; both
    lengths are capped at the encoder's position window (``max_position_embeddings``).

    ``runtime``: ``"onnx"`` runs a float32 ONNX export of encoder + head + normalisation (made once,
    cached under ``cache_dir()/onnx``) on onnxruntime with ``torch.get_num_threads()`` threads; MaxSim stays
    in numpy. ``"torch"`` runs the checkpoint itself (bf16/fp16 on CUDA, fp32 on CPU, or ``dtype``);
    ``"auto"`` picks onnx on CPU when onnxruntime imports, torch on CUDA. ``int8=True`` (onnx only) runs a
    dynamically quantised copy of the export. ``encoder``/``projection`` exist on torch, ``session`` on onnx.
    ``device``, ``batch_tokens``, ``max_batch_size``, ``dtype``, ``runtime`` and ``int8`` are the
    ``RuntimeOptions``.

    Raises ``ImportError`` naming the extra without torch/transformers (or onnxruntime for
    ``runtime="onnx"``), ``ValueError`` naming the id/path when the checkpoint cannot be loaded or has no
    projection head, or when ``runtime``/``int8``/``dtype`` contradict each other.
    """

    name = "colbert"

    def __init__(
        self,
        model_name_or_path: str | Path = DEFAULT_COLBERT_ID,
        *,
        query_max_length: int = 32,
        doc_max_length: int = 180,
        **options: Unpack[RuntimeOptions],
    ) -> None:
        folder, transformers = self._start(model_name_or_path, what="ColBERT checkpoint", **options)
        if self.runtime == "onnx":
            self._open_onnx(folder)
            config = self._read_config(folder, transformers)
        else:
            self._load_torch(folder, transformers)
            config = self.encoder.config
        # Neither side may outgrow the position table (a longer input would fail inside the model).
        window = int(getattr(config, "max_position_embeddings", 0) or 0) or doc_max_length
        query_max_length, doc_max_length = min(query_max_length, window), min(doc_max_length, window)
        # One slot is reserved for the marker token inserted after [CLS].
        self.query_tokenizer = TextTokenizer.from_dir(folder, query_max_length - 1)
        self.doc_tokenizer = TextTokenizer.from_dir(folder, doc_max_length - 1)
        tok = self.doc_tokenizer.tokenizer
        self._q_marker = tok.token_to_id(QUERY_MARKER)
        self._d_marker = tok.token_to_id(DOC_MARKER)
        self._mask_id = tok.token_to_id("[MASK]")
        self.query_max_length = query_max_length
        self.truncated = 0

    def _load_torch(self, folder: Path, transformers: Any) -> None:
        projection = load_projection(folder)
        try:
            self.encoder = transformers.AutoModel.from_pretrained(str(folder), dtype=self.dtype)
        except Exception as exc:
            raise self._cannot_load(exc) from exc
        self.encoder.to(self.device).eval()
        hidden = int(self.encoder.config.hidden_size)
        if projection.shape[1] != hidden:
            raise ValueError(
                f"ColBERT checkpoint {self.model_name!r}: projection expects {projection.shape[1]}-d input "
                f"but the encoder is {hidden}-d"
            )
        self.projection = self._torch.from_numpy(projection).to(self.device, self.dtype)  # (out, hidden)
        self.dim = int(projection.shape[0])

    def _open_onnx(self, folder: Path) -> None:
        graph, session = self._open_export(export_colbert, folder)
        width = session.session.get_outputs()[0].shape[-1]  # the head's output size, fixed in the graph
        if not isinstance(width, int):
            raise ValueError(
                f"ColBERT export {str(graph)!r} has no fixed vector size; delete it to re-export"
            )
        self.dim = width

    def _with_marker(self, encoded: Encoded, marker: int | None) -> Encoded:
        if marker is None:  # vocabulary without ColBERT's reserved tokens: no marker
            return encoded
        ids = [[*row[:1], marker, *row[1:]] for row in encoded.ids]
        types = [[*row[:1], 0, *row[1:]] for row in encoded.type_ids]
        return Encoded(ids=ids, type_ids=types, truncated=encoded.truncated)

    def _vectors(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """Unit-length token vectors (batch, seq, dim) float32, padded positions included."""

        def project(inputs: dict[str, Any]) -> Any:
            hidden = self.encoder(**inputs).last_hidden_state  # (batch, seq, hidden)
            projected = hidden @ self.projection.T  # (batch, seq, dim)
            return self._torch.nn.functional.normalize(projected.float(), dim=-1)

        return self._forward(feeds, project)

    def encode_query(self, query: str) -> np.ndarray:
        """Query token vectors (query_max_length, dim), unit length, [MASK]-augmented."""
        encoded = self._with_marker(self.query_tokenizer.encode([query]), self._q_marker)
        ids = encoded.ids[0]
        if self._mask_id is not None:
            ids = ids + [self._mask_id] * (self.query_max_length - len(ids))
        n = len(ids)
        feeds = {
            "input_ids": np.asarray([ids], dtype=np.int64),
            # ColBERT lets the query attend to its [MASK] padding: that is the augmentation.
            "attention_mask": np.ones((1, n), dtype=np.int64),
            "token_type_ids": np.zeros((1, n), dtype=np.int64),
        }
        return self._vectors(feeds)[0]

    def encode_docs(self, texts: list[str]) -> list[np.ndarray]:
        """Per-document token vectors (tokens_i, dim), unit length, padding removed."""
        encoded = self._with_marker(self.doc_tokenizer.encode(check_texts(texts)), self._d_marker)
        self.truncated += sum(encoded.truncated)

        def run(positions: list[int]) -> list[np.ndarray]:
            feeds = self.doc_tokenizer.pad(encoded, positions)
            vectors = self._vectors(feeds)  # (batch, seq, dim)
            return [vectors[row, : len(encoded.ids[i])] for row, i in enumerate(positions)]

        return run_batched(encoded.lengths, self.policy, run)

    def score(self, query: str, texts: list[str]) -> list[float]:
        """MaxSim of each text against ``query``, in order; ``[]`` for none. ``ValueError`` on non-strings."""
        items = check_rerank_input(query, texts)
        if not items:
            return []
        q = self.encode_query(query)
        return [maxsim(q, d) for d in self.encode_docs(items)]
