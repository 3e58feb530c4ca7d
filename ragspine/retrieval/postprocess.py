"""Post-retrieval: a deterministic chain of snippet postprocessors between rerank and prompt assembly.

- ``mmr``: maximal marginal relevance — re-picks the ranked snippets trading relevance (rank) against
  similarity to those already picked (token Jaccard), so near-duplicates sink;
- ``lost_in_middle``: puts the best hits at the head and the tail, the weakest in the middle;
- ``compression``: extractive — keeps the sentences of each snippet that share enough of the query's
  terms and writes them to ``prompt_text``; ``text`` and every reference field stay byte-identical.

Postprocessors run on RESTRICTED-free snippets (after exit #2), return new lists of copies (never mutate
their input) and call no model. ``make_postprocessor("mmr,lost_in_middle")`` builds the chain.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

from ragspine.common.choices import UnavailableChoice, nothing, published_fallback
from ragspine.common.registry import Registry
from ragspine.retrieval.text.tokenizer import tokenize
from ragspine.settings import OFF, Settings, choice

POSTPROCESSOR_ENV = "RAGSPINE_POSTPROCESSOR"
PROMPT_TEXT_KEY = "prompt_text"
DEFAULT_MMR_LAMBDA = 0.5
DEFAULT_COMPRESSION_THRESHOLD = 0.3

Snippet = dict[str, Any]


@runtime_checkable
class NodePostprocessor(Protocol):
    def postprocess(self, query: str, results: list[Snippet]) -> list[Snippet]: ...


class Compressor(Protocol):
    """Compresses one snippet's text for the prompt (the seam for a model compressor). A plain callable
    ``(query, text) -> str`` is accepted wherever a compressor is."""

    def compress(self, query: str, text: str) -> str: ...


def _check_results(results: object) -> list[Snippet]:
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ValueError("results must be a list of snippet dicts")
    return results


def _terms(text: object) -> frozenset[str]:
    return frozenset(tokenize(text)) if isinstance(text, str) else frozenset()


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _check_share(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")


@dataclass
class MMRPostprocessor:
    """Maximal marginal relevance over the ranked snippets.

    Relevance is the snippet's rank in the input (1.0 for the first down to 1/n), similarity the token
    Jaccard of two snippets' texts. Each step picks ``argmax lambda_*rel - (1-lambda_)*max_sim`` (ties: the
    better-ranked). ``top_n`` keeps only the first picks (None = all, reordered). ``lambda_=1`` keeps the
    input order.
    """

    lambda_: float = DEFAULT_MMR_LAMBDA
    top_n: int | None = None

    def __post_init__(self) -> None:
        _check_share(self.lambda_, "MMR lambda_")
        if self.top_n is not None and (
            isinstance(self.top_n, bool) or not isinstance(self.top_n, int) or self.top_n < 1
        ):
            raise ValueError(f"MMR top_n must be a positive integer or None, got {self.top_n!r}")

    def postprocess(self, query: str, results: list[Snippet]) -> list[Snippet]:
        results = _check_results(results)
        n = len(results)
        limit = n if self.top_n is None else min(self.top_n, n)
        terms = [_terms(r.get("text")) for r in results]
        relevance = [1.0 - i / n for i in range(n)]
        remaining = list(range(n))
        picked: list[int] = []
        max_sim = [0.0] * n
        while remaining and len(picked) < limit:
            best = max(
                remaining,
                key=lambda i: (self.lambda_ * relevance[i] - (1.0 - self.lambda_) * max_sim[i], -i),
            )
            picked.append(best)
            remaining.remove(best)
            for i in remaining:
                max_sim[i] = max(max_sim[i], _jaccard(terms[i], terms[best]))
        return [results[i] for i in picked]  # a pure reordering: the given snippets, none made


@dataclass
class LostInTheMiddlePostprocessor:
    """Reorders ranked snippets 1, 3, 5, ..., 6, 4, 2: the best at the head and the tail."""

    def postprocess(self, query: str, results: list[Snippet]) -> list[Snippet]:
        results = _check_results(results)
        return results[0::2] + results[1::2][::-1]  # the given snippets, reordered


_SENTENCE = re.compile(r"[^。！？!?.\n]+(?:[。！？!?.]+|\n+|$)")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` with their end punctuation (CJK and Latin), joined back they give ``text``."""
    return [m.group(0) for m in _SENTENCE.finditer(text) if m.group(0)]


class ExtractiveCompressor:
    """Keeps the sentences holding at least ``threshold`` of the query's distinct terms, in order, and
    always the best one; a text without a matching sentence, or a query without terms, stays whole."""

    def __init__(self, threshold: float = DEFAULT_COMPRESSION_THRESHOLD) -> None:
        self.threshold = threshold

    def compress(self, query: str, text: str) -> str:
        query_terms = _terms(query)
        sentences = split_sentences(text)
        if not query_terms or len(sentences) < 2:
            return text
        shares = [len(query_terms & _terms(s)) / len(query_terms) for s in sentences]
        best = max(range(len(sentences)), key=lambda i: (shares[i], -i))
        if shares[best] == 0:
            return text
        kept = [s for i, s in enumerate(sentences) if i == best or shares[i] >= self.threshold]
        return "".join(kept).strip()


@dataclass
class CompressionPostprocessor:
    """Writes the compressed text of each snippet to ``prompt_text`` (``compressor`` default: extractive
    at ``threshold``); order, ``text`` and every other field are unchanged. An existing ``prompt_text``
    (e.g. a parent window) is what gets compressed."""

    threshold: float = DEFAULT_COMPRESSION_THRESHOLD
    compressor: Compressor | Callable[[str, str], str] | None = None

    def __post_init__(self) -> None:
        _check_share(self.threshold, "compression threshold")
        if self.compressor is not None and not (
            callable(getattr(self.compressor, "compress", None)) or callable(self.compressor)
        ):
            raise ValueError(
                "compressor must have compress(query, text) or be a callable (query, text) -> str, "
                f"got {type(self.compressor).__name__}"
            )

    def _compress(self, query: str, text: str) -> str:
        compressor = self.compressor or ExtractiveCompressor(self.threshold)
        method = getattr(compressor, "compress", None)
        out = (
            method(query, text)
            if callable(method)
            else cast(Callable[[str, str], str], compressor)(query, text)
        )
        if not isinstance(out, str):
            raise TypeError(f"the compressor returned {type(out).__name__}, not the compressed text")
        return out

    def postprocess(self, query: str, results: list[Snippet]) -> list[Snippet]:
        results = _check_results(results)
        out = []
        for result in results:
            copy = dict(result)
            source = copy.get(PROMPT_TEXT_KEY) or copy.get("text")
            if isinstance(source, str) and source:
                copy[PROMPT_TEXT_KEY] = self._compress(query, source)
            out.append(copy)
        return out


@dataclass
class ChainPostprocessor:
    """Runs ``processors`` in order, each on the previous one's output."""

    processors: Sequence[NodePostprocessor] = field(default_factory=list)

    def postprocess(self, query: str, results: list[Snippet]) -> list[Snippet]:
        results = _check_results(results)
        for processor in self.processors:
            results = processor.postprocess(query, results)
        return results


POSTPROCESSORS = Registry("postprocessor")
POSTPROCESSORS.register("mmr", MMRPostprocessor)
POSTPROCESSORS.register(
    "lost_in_middle", LostInTheMiddlePostprocessor, aliases=("lost_in_the_middle", "litm", "reorder")
)
POSTPROCESSORS.register("compression", CompressionPostprocessor, aliases=("compress", "extractive"))

_OPTIONS = {"mmr": ("lambda_", "top_n"), "lost_in_middle": (), "compression": ("threshold", "compressor")}


@published_fallback(nothing, "no postprocessor")
def make_postprocessor(spec: str | None = None, **kwargs: object) -> NodePostprocessor | None:
    """The postprocessor (or chain, for a comma list) named by ``spec``; ``none``/blank → None.

    ``spec=None`` reads ``settings.postprocessor`` (``RAGSPINE_POSTPROCESSOR``) of ``settings=`` in
    ``kwargs``, else the default: none. Options go to the stages that take them: ``lambda_``/``top_n`` (mmr),
    ``threshold``/``compressor`` (compression). Raises ``ValueError`` for an unknown name, a repeated
    stage, an option no selected stage takes, or a bad option value.
    """
    settings = kwargs.pop("settings", None)
    if spec is None:
        spec = (settings if isinstance(settings, Settings) else Settings()).postprocessor
    if not isinstance(spec, str):
        raise ValueError(f"postprocessor spec must be a string such as 'mmr,lost_in_middle', got {spec!r}")
    names = [choice(part) for part in spec.split(",")]
    names = [n for n in names if n != OFF]
    if not names:
        return None
    try:
        canonical = [POSTPROCESSORS.canonical(n) for n in names]
    except ValueError as exc:  # an unknown name
        raise UnavailableChoice(str(exc)) from None
    repeated = sorted({n for n in canonical if canonical.count(n) > 1})
    if repeated:
        raise ValueError(f"postprocessor {', '.join(repeated)} named twice in {spec!r}")
    unused = set(kwargs) - {opt for n in canonical for opt in _OPTIONS[n]}
    if unused:
        raise ValueError(f"options {sorted(unused)} are not taken by any of {canonical}")
    stages = [
        POSTPROCESSORS.make(n, **{k: v for k, v in kwargs.items() if k in _OPTIONS[n]}) for n in canonical
    ]
    return stages[0] if len(stages) == 1 else ChainPostprocessor(stages)
