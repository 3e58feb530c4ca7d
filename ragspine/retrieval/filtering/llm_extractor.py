"""``LLMFilterExtractor``: a model reads the metadata filters a question implies, within a vocabulary.

The prompt holds only the question and the filterable vocabulary (field → canonical values, from the
domain profile: ``profile_vocab``), never stored text. The reply is read as ``field: value`` lines; a pair
is kept only when the field is in the vocabulary and the value is one of its canonical values or surface
forms (mapped to the canonical value), so the model can never invent a filter. The result narrows like
``ControlledVocabFilterExtractor``'s (one value → ``eq``, several → ``in``, fields ANDed).

The call is bounded (``ragspine.retrieval.llm.calls.bounded_chat``); a failed, late or garbage answer raises
``LLMUnavailable`` (the caller answers without the extra filter, flagged); a usable answer that names
nothing the vocabulary holds gives ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter
from ragspine.retrieval.llm.calls import DEFAULT_LLM_DEADLINE_S, bounded_chat
from ragspine.retrieval.llm.providers import LLMProvider

FILTER_SYSTEM_PROMPT = (
    "You read search filters from questions. Answer only with 'field: value' lines taken from the list, "
    "or 'none'."
)


def build_filter_prompt(query: str, vocab: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    lines = [f"- {field}: {', '.join(values)}" for field, values in vocab.items()]
    return (
        "Which of these metadata filters does the question ask for? Use only fields and values listed.\n"
        "Filters:\n" + "\n".join(lines) + f"\nQuestion: {' '.join(query.split())}"
    )


class LLMFilterExtractor:
    """``FilterExtractor`` backed by an ``LLMProvider``. ``vocab``: field → {canonical: [surface forms]}
    (``make_filter_extractor("llm")`` passes the profile's ``profile_vocab``). ``ValueError`` for a missing
    provider or an empty vocabulary."""

    def __init__(
        self,
        provider: LLMProvider,
        *,
        vocab: Mapping[str, Mapping[str, Sequence[str]]],
        budget_s: float = DEFAULT_LLM_DEADLINE_S,
    ) -> None:
        if provider is None:
            raise ValueError("LLMFilterExtractor needs an LLM provider (make_llm_provider)")
        if not isinstance(vocab, Mapping) or not vocab:
            raise ValueError("vocab must be a non-empty mapping field -> {canonical value: [surface forms]}")
        self.provider = provider
        self.budget_s = budget_s
        self.vocab = {field: dict(values) for field, values in vocab.items()}
        self._lookup: dict[tuple[str, str], str] = {}
        for field, values in self.vocab.items():
            for canonical, forms in values.items():
                for form in (canonical, *forms):
                    self._lookup.setdefault((field.lower(), form.strip().lower()), canonical)
        self._fields = {field.lower(): field for field in self.vocab}

    def extract(self, query: str) -> MetadataFilter | None:
        if not isinstance(query, str) or not query.strip():
            return None
        messages = [
            {"role": "system", "content": FILTER_SYSTEM_PROMPT},
            {"role": "user", "content": build_filter_prompt(query, self.vocab)},
        ]
        reply = bounded_chat(self.provider, messages, budget_s=self.budget_s)
        chosen: dict[str, list[str]] = {}
        for line in reply.splitlines():
            name, sep, value = line.strip().lstrip("-* ").partition(":")
            field = self._fields.get(name.strip().lower())
            if not sep or field is None:
                continue
            for part in value.split(","):
                canonical = self._lookup.get((field.lower(), part.strip().lower()))
                if canonical is not None and canonical not in chosen.setdefault(field, []):
                    chosen[field].append(canonical)
        conditions = [
            FilterCondition(field, "eq", values[0])
            if len(values) == 1
            else FilterCondition(field, "in", sorted(values))
            for field, values in sorted(chosen.items())
            if values
        ]
        return MetadataFilter(tuple(conditions)) if conditions else None
