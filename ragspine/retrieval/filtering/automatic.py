"""Automatic filter extraction: an opt-in stage that reads metadata constraints out of the query.

Its only output is a ``MetadataFilter`` (or ``None``), so it cannot rewrite an answer; the retriever ANDs
it with the caller's filters, so it can only narrow. A failed or absent extraction returns ``None`` and
leaves the candidate set as the caller's filters made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragspine.retrieval.filtering.metadata_filter import FilterCondition, MetadataFilter, all_of
from ragspine.retrieval.seams import FilterExtractor
from ragspine.settings import OFF, Settings, choice

if TYPE_CHECKING:
    from ragspine.common.company_profile import DomainProfile

# A generic geography/language vocabulary (field -> canonical value -> surface forms), for callers that
# pass it explicitly; the default vocabulary comes from the domain profile (``profile_vocab``).
DEFAULT_VOCAB: dict[str, dict[str, list[str]]] = {
    "geography": {
        "CN": ["china", "chinese mainland", "mainland china", "中国", "中国大陆", "内地"],
        "HK": ["hong kong", "香港"],
        "US": ["united states", "usa", "u.s.", "美国"],
        "EU": ["europe", "european union", "欧洲", "欧盟"],
    },
    "language": {
        "zh": ["in chinese", "中文"],
        "en": ["in english", "英文"],
    },
}

_LANGUAGE_VOCAB: dict[str, list[str]] = DEFAULT_VOCAB["language"]


def profile_vocab(profile: DomainProfile) -> dict[str, dict[str, list[str]]]:
    """The filterable vocabulary of a domain profile: ``entity`` (home entity synonyms and labels, the
    home company name, external entities; code -> surface forms in profile order) plus ``language``
    (``"in chinese"``/``"中文"`` -> ``zh``, ``"in english"``/``"英文"`` -> ``en``)."""
    entity: dict[str, list[str]] = {}
    pairs = [
        (profile.home_company_name, profile.home_entity_code),
        *profile.home_entity_synonyms.items(),
        *((label, code) for code, label in profile.home_entity_labels.items()),
        *profile.external_entities.items(),
    ]
    claimed: set[str] = set()
    for form, code in pairs:
        form, code = form.strip(), code.strip()
        if not form or not code or form.lower() in claimed:
            continue
        claimed.add(form.lower())
        entity.setdefault(code, []).append(form)
    vocab: dict[str, dict[str, list[str]]] = {"language": {k: list(v) for k, v in _LANGUAGE_VOCAB.items()}}
    if entity:
        vocab = {"entity": entity, **vocab}
    return vocab


FILTER_EXTRACTOR_CHOICES: tuple[str, ...] = ("none", "controlled_vocab", "vocab", "llm")


def narrow(
    extractor: FilterExtractor | None, query: str, metadata_filter: MetadataFilter | None
) -> tuple[MetadataFilter | None, str]:
    """The filter-extraction stage: ``metadata_filter`` AND what ``extractor`` reads out of ``query``
    (extraction can only narrow). Returns the filter and, when the extractor failed, its error: the query
    goes on with the caller's filters alone, never widened."""
    if extractor is None:
        return metadata_filter, ""
    try:
        extracted = extractor.extract(query)
    except Exception as exc:  # a failed extraction never widens and never fails the query
        return metadata_filter, f"{type(exc).__name__}: {exc}"
    if not isinstance(extracted, MetadataFilter):
        return metadata_filter, ""
    return all_of(metadata_filter, extracted), ""


def _is_ascii_word_char(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


class ControlledVocabFilterExtractor:
    """Matches a controlled vocabulary's surface forms (Chinese and English) inside the query.

    ``vocab`` maps field → {canonical value: [surface forms]}; the canonical value counts as a form too.
    ASCII matching is case-insensitive and respects word boundaries ("us" does not fire inside "business");
    other scripts match as substrings. Overlapping hits resolve to the longest form ("中国大陆" beats
    "中国"). A field with one canonical hit gives ``eq``, with several gives ``in``; fields are ANDed.

    Without ``vocab`` the vocabulary is ``profile_vocab(profile)``: ``profile`` or, when ``None``, the
    profile named by ``RAGSPINE_COMPANY_CONFIG`` (``load_company_profile()``), else the built-in default.

    Raises ``ValueError`` at construction for a malformed vocabulary or when both ``vocab`` and
    ``profile`` are given; ``extract`` never raises.
    """

    def __init__(
        self,
        vocab: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
        *,
        profile: DomainProfile | None = None,
    ) -> None:
        if vocab is not None and profile is not None:
            raise ValueError("give ControlledVocabFilterExtractor a vocab or a profile, not both")
        if vocab is None:
            if profile is None:
                from ragspine.common.company_profile import profile_for

                profile = profile_for()
            vocab = profile_vocab(profile)
        if not isinstance(vocab, Mapping) or not vocab:
            raise ValueError("vocab must be a non-empty mapping field -> {canonical value: [surface forms]}")
        # (lowered form, field, canonical) in vocabulary order; order breaks ties deterministically.
        self._forms: list[tuple[str, str, str]] = []
        for field, values in vocab.items():
            if not isinstance(field, str) or not field or not isinstance(values, Mapping):
                raise ValueError(f"vocab[{field!r}] must map canonical values to lists of surface forms")
            for canonical, forms in values.items():
                if not isinstance(canonical, str) or not canonical.strip():
                    raise ValueError(f"vocab[{field!r}] has a canonical value that is not a non-empty string")
                if isinstance(forms, str) or not isinstance(forms, Sequence):
                    raise ValueError(f"vocab[{field!r}][{canonical!r}] must be a list of surface forms")
                for form in (canonical, *forms):
                    if not isinstance(form, str) or not form.strip():
                        raise ValueError(f"vocab[{field!r}][{canonical!r}] has an empty or non-string form")
                    self._forms.append((form.strip().lower(), field, canonical))

    def extract(self, query: str) -> MetadataFilter | None:
        """The filter the query's vocabulary implies, or ``None`` (also for empty or non-string queries)."""
        if not isinstance(query, str) or not query.strip():
            return None
        text = query.lower()
        hits: list[tuple[int, int, int, str, str]] = []  # (start, end, vocab order, field, canonical)
        for order, (form, field, canonical) in enumerate(self._forms):
            start = text.find(form)
            while start != -1:
                end = start + len(form)
                if self._on_word_boundary(text, form, start, end):
                    hits.append((start, end, order, field, canonical))
                start = text.find(form, start + 1)
        # Longest first, then earliest, then vocabulary order: a deterministic greedy cover of the query.
        taken: list[tuple[int, int]] = []
        chosen: dict[str, list[str]] = {}
        hits.sort(key=lambda h: (-(h[1] - h[0]), h[0], h[2]))
        for start, end, _, field, canonical in hits:
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            taken.append((start, end))
            values = chosen.setdefault(field, [])
            if canonical not in values:
                values.append(canonical)
        if not chosen:
            return None
        conditions: list[FilterCondition] = []
        for field in sorted(chosen):
            values = sorted(chosen[field])
            conditions.append(
                FilterCondition(field, "eq", values[0])
                if len(values) == 1
                else FilterCondition(field, "in", values)
            )
        return MetadataFilter(tuple(conditions))

    @staticmethod
    def _on_word_boundary(text: str, form: str, start: int, end: int) -> bool:
        # Only ASCII word edges need a boundary; CJK text has no spaces between words.
        if _is_ascii_word_char(form[0]) and start > 0 and _is_ascii_word_char(text[start - 1]):
            return False
        return not (_is_ascii_word_char(form[-1]) and end < len(text) and _is_ascii_word_char(text[end]))


def make_filter_extractor(
    spec: str | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> FilterExtractor | None:
    """Select a filter extractor by name (case-insensitive).

    ``spec=None`` resolves through ``settings.filter_extractor`` (``RAGSPINE_FILTER_EXTRACTOR``), or without
    ``settings`` to the default. ``"none"`` (or blank,
    ``"off"``) → ``None`` (the default: no extraction); ``"controlled_vocab"``/``"vocab"`` →
    ``ControlledVocabFilterExtractor(**kwargs)`` (``vocab=`` or ``profile=``; neither: the profile);
    ``"llm"`` → ``LLMFilterExtractor`` (``provider=`` or the settings' ``RAGSPINE_LLM_*``; same vocabulary).
    Raises ``ValueError`` listing the choices for an unknown name.
    """
    if spec is None:
        spec = (settings or Settings()).filter_extractor
    name = choice(spec)
    if name == OFF:
        return None
    if name in ("controlled_vocab", "vocab"):
        if settings is not None and "vocab" not in kwargs and "profile" not in kwargs:
            from ragspine.common.company_profile import profile_for

            # The profile the given settings name; never the environment behind them.
            kwargs["profile"] = profile_for(settings.company_config)
        return ControlledVocabFilterExtractor(**kwargs)
    if name == "llm":
        from ragspine.retrieval.filtering.llm_extractor import LLMFilterExtractor
        from ragspine.retrieval.llm.providers import make_llm_provider

        # No settings: the profile's own default (load_company_profile), as for controlled_vocab.
        profile_path = None if settings is None else settings.company_config
        settings = settings or Settings()
        provider = kwargs.pop("provider", None) or make_llm_provider(settings=settings)
        if provider is None:
            raise ValueError(
                "filter extractor 'llm' needs an LLM: pass provider= or settings with llm_base_url "
                "(RAGSPINE_LLM_BASE_URL)"
            )
        if "vocab" not in kwargs:
            from ragspine.common.company_profile import profile_for

            profile = kwargs.pop("profile", None) or profile_for(profile_path)
            kwargs["vocab"] = profile_vocab(profile)
        kwargs.setdefault("budget_s", settings.llm_deadline_s)
        return LLMFilterExtractor(provider, **kwargs)
    raise ValueError(f"unknown filter extractor {spec!r}; choices: {', '.join(FILTER_EXTRACTOR_CHOICES)}")
