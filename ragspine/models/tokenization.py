"""A thin layer over Hugging Face ``tokenizers``: truncation that is counted, padding to numpy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.packaged import require


@dataclass(frozen=True)
class Encoded:
    """Token ids per input (already truncated) and whether truncation cut each one."""

    ids: list[list[int]]
    type_ids: list[list[int]]
    truncated: list[bool]

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


class TextTokenizer:
    """Wraps a fast tokenizer with a fixed ``max_length``; inputs longer than that are cut, never rejected."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        if max_length <= 1:
            raise ValueError(f"max_length must be at least 2 tokens, got {max_length}")
        self._tok = tokenizer
        self.max_length = max_length
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_length)
        pad = self._tok.padding
        self.pad_id = int(pad["pad_id"]) if pad else (self._tok.token_to_id("[PAD]") or 0)

    @classmethod
    def from_dir(cls, model_dir: str | Path, max_length: int) -> TextTokenizer:
        """Load ``tokenizer.json`` from ``model_dir`` (or convert a slow tokenizer through transformers).

        Raises ``ValueError`` naming the folder when no tokenizer can be built from it.
        """
        tokenizers = require("tokenizers")
        folder = Path(model_dir)
        file = folder / "tokenizer.json"
        if file.is_file():
            return cls(tokenizers.Tokenizer.from_file(str(file)), max_length)
        transformers = require("transformers")
        try:
            fast = transformers.AutoTokenizer.from_pretrained(str(folder), use_fast=True)
        except (
            Exception
        ) as exc:  # transformers raises OSError/ValueError/KeyError depending on what is missing
            raise ValueError(f"no usable tokenizer in {str(folder)!r}: {exc}") from exc
        return cls(fast.backend_tokenizer, max_length)

    @property
    def tokenizer(self) -> Any:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def special_ids(self) -> set[int]:
        """Ids of special tokens ([CLS], [SEP], [PAD], [MASK], [UNK], ...)."""
        return {i for i, tok in self._tok.get_added_tokens_decoder().items() if tok.special}

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Tokenise single texts, with special tokens, cut to ``max_length``."""
        return self._pack(self._tok.encode_batch(list(texts)))

    def encode_pairs(self, first: str, seconds: Sequence[str]) -> Encoded:
        """Tokenise (first, second) pairs; the longer side is cut first past ``max_length``."""
        return self._pack(self._tok.encode_batch([(first, s) for s in seconds]))

    @staticmethod
    def _pack(encodings: list[Any]) -> Encoded:
        return Encoded(
            ids=[list(e.ids) for e in encodings],
            type_ids=[list(e.type_ids) for e in encodings],
            truncated=[bool(e.overflowing) for e in encodings],
        )

    def pad(self, encoded: Encoded, positions: Sequence[int]) -> dict[str, np.ndarray]:
        """Right-pad the chosen inputs to their longest: int64 ids, attention mask and type ids."""
        width = max(len(encoded.ids[i]) for i in positions)
        n = len(positions)
        ids = np.full((n, width), self.pad_id, dtype=np.int64)  # (batch, seq)
        mask = np.zeros((n, width), dtype=np.int64)  # (batch, seq)
        types = np.zeros((n, width), dtype=np.int64)  # (batch, seq)
        for row, i in enumerate(positions):
            k = len(encoded.ids[i])
            ids[row, :k] = encoded.ids[i]
            mask[row, :k] = 1
            types[row, :k] = encoded.type_ids[i]
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def check_texts(texts: Any, *, what: str = "texts") -> list[str]:
    """Validate a list of ``str`` inputs; ``ValueError`` says which item is wrong."""
    if isinstance(texts, str):
        raise ValueError(f"{what} must be a list of strings, not a single string")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise ValueError(f"{what}[{i}] must be a str, got {type(t).__name__}")
    return items


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Row-wise unit length; all-zero rows stay zero instead of becoming NaN."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average token vectors over real (unmasked) tokens: (batch, seq, dim) x (batch, seq) -> (batch, dim)."""
    weights = mask[..., None].astype(hidden.dtype)  # (batch, seq, 1)
    summed = (hidden * weights).sum(axis=1)  # (batch, dim)
    counts = np.maximum(weights.sum(axis=1), 1e-9)  # (batch, 1)
    return summed / counts
