"""Contextual headers: a deterministic line of document context prepended to a chunk's index text only.

A chunk cut out of a long document loses what the document is about: its title, the entity and period it
reports on, the heading it sits under. ``contextual_index_text`` puts that back in front of the text that
is tokenised and embedded (``NarrativeIndex(index_text_fn=...)``), so a query that names the document's
subject finds every chunk of it, not only the first. The header is built from the chunk's own metadata
only (controlled-vocabulary codes for entity and period, the title and heading as ingested): nothing is
generated, and ``chunk.text``, ``source_locator`` and citations stay byte-identical.

Header: the non-empty parts of ``title · entity · period · heading``, each whitespace-collapsed. The
entity is its code followed by the profile's display label when the profile knows one (``ACME_HK ACME Hong
Kong``). A part the chunk's text already contains (the title line of a document's first chunk, a heading
that opens the chunk) is left out rather than repeated. Selected by ``RAGSPINE_CONTEXTUAL``
(``Settings.contextual``): ``none`` (default, the index text is ``chunk.text``), ``header``, or
``document``: the header plus document-level evidence (``document_weight``): a chunk is also scored by how
well its whole document matches the query, so a chunk of the right document is not outranked by a lone
matching chunk of an unrelated one (``HybridRetriever(doc_weight=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragspine.common.company_profile import DomainProfile
    from ragspine.settings import Settings

IndexTextFn = Callable[[Any], str]

CONTEXTUAL_ENV = "RAGSPINE_CONTEXTUAL"
HEADER_SEPARATOR = " · "
CONTEXTUAL_CHOICES: tuple[str, ...] = ("none", "header", "document")
# Share of a chunk's lexical score that comes from its whole document under ``document``.
DEFAULT_DOCUMENT_WEIGHT = 0.5
_ON = ("header", "contextual", "on", "true", "1")
_DOCUMENT = ("document", "doc")
_OFF = ("", "none", "off", "false", "0")


def _one_line(value: object) -> str:
    return " ".join(str(value or "").split())


def _entity_part(code: str, profile: DomainProfile | None) -> str:
    if not code or profile is None:
        return code
    label = profile.home_entity_labels.get(code, "")
    if not label and code == profile.home_entity_code:
        label = profile.home_company_name
    label = _one_line(label)
    return f"{code} {label}" if label and label != code else code


def build_context_header(chunk: Any, *, profile: DomainProfile | None = None) -> str:
    """The header line for ``chunk`` (any object with ``text`` and optional ``title``, ``entity``,
    ``period``, ``heading``): the non-empty parts of title · entity · period · heading joined by
    ``" · "``, parts already inside ``chunk.text`` left out. ``""`` when nothing is left."""
    text = _one_line(getattr(chunk, "text", ""))
    parts = [
        _one_line(getattr(chunk, "title", "")),
        _entity_part(_one_line(getattr(chunk, "entity", "")), profile),
        _one_line(getattr(chunk, "period", "")),
        _one_line(getattr(chunk, "heading", "")),
    ]
    kept: list[str] = []
    for part in parts:
        if part and part not in text and part not in kept:
            kept.append(part)
    return HEADER_SEPARATOR.join(kept)


def contextual_index_text(chunk: Any, *, profile: DomainProfile | None = None) -> str:
    """``header + "\\n" + chunk.text`` (just ``chunk.text`` when the header is empty)."""
    text = str(getattr(chunk, "text", ""))
    header = build_context_header(chunk, profile=profile)
    return f"{header}\n{text}" if header else text


def make_index_text_fn(
    spec: str | None = None, *, profile: DomainProfile | None = None, settings: Settings | None = None
) -> IndexTextFn | None:
    """The index-text function ``spec`` names (case-insensitive): ``"none"`` (also ``""``/``off``) →
    ``None`` (index ``chunk.text``, the default); ``"header"`` (also ``contextual``/``on``) and
    ``"document"`` → a function applying ``contextual_index_text`` with ``profile`` (entity labels;
    ``None`` shows codes only).

    ``spec=None`` resolves through ``settings.contextual`` (``RAGSPINE_CONTEXTUAL``), or without ``settings``
    to the default, ``"none"``. Raises ``ValueError`` listing the choices for an unknown name.
    """
    if spec is None:
        from ragspine.settings import Settings

        spec = (settings or Settings()).contextual
    name = str(spec).strip().lower()
    if name in _OFF:
        return None
    if name in _ON or name in _DOCUMENT:
        if profile is None:
            return contextual_index_text

        def index_text(chunk: Any) -> str:
            return contextual_index_text(chunk, profile=profile)

        return index_text
    raise ValueError(
        f"unknown {CONTEXTUAL_ENV} value {spec!r}; choose one of: {', '.join(CONTEXTUAL_CHOICES)}"
    )


def document_weight(spec: str | None, weight: float = DEFAULT_DOCUMENT_WEIGHT) -> float:
    """The weight of document-level evidence ``spec`` asks for: ``weight`` for ``"document"``, else 0.0
    (chunks are scored on their own). Raises ``ValueError`` for an unknown ``spec`` (as
    ``make_index_text_fn``) or a ``weight`` outside ``[0, 1)``."""
    name = str(spec or "").strip().lower()
    if name not in _OFF + _ON + _DOCUMENT:
        raise ValueError(
            f"unknown {CONTEXTUAL_ENV} value {spec!r}; choose one of: {', '.join(CONTEXTUAL_CHOICES)}"
        )
    if name not in _DOCUMENT:
        return 0.0
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0.0 <= weight < 1.0:
        raise ValueError(f"RAGSPINE_DOC_WEIGHT must be a number in [0, 1), got {weight!r}")
    return float(weight)


def normalize_contextual(spec: str | None) -> str:
    """The canonical name of a contextual setting: ``"none"``, ``"header"`` or ``"document"``.
    Raises ``ValueError`` listing the choices for anything else."""
    name = str(spec or "").strip().lower()
    if name in _OFF:
        return "none"
    if name in _ON:
        return "header"
    if name in _DOCUMENT:
        return "document"
    raise ValueError(
        f"unknown {CONTEXTUAL_ENV} value {spec!r}; choose one of: {', '.join(CONTEXTUAL_CHOICES)}"
    )


__all__ = [
    "CONTEXTUAL_CHOICES",
    "CONTEXTUAL_ENV",
    "DEFAULT_DOCUMENT_WEIGHT",
    "HEADER_SEPARATOR",
    "IndexTextFn",
    "build_context_header",
    "contextual_index_text",
    "document_weight",
    "make_index_text_fn",
    "normalize_contextual",
]
