"""The deterministic security gate: a question or generated variant naming an external entity is refused.

The gate is driven by the domain profile's external (competitor) entities. It screens the user's question
and every text a query-time stage generates (HyDE probe, RAG-Fusion variant, step-back question,
sub-question) before that text reaches retrieval, so a competitor query never retrieves home numbers.
``detect(text)`` is the small screen protocol the graph extractors and ``GraphQuery`` already call.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ragspine.common.company_profile import DomainProfile, load_company_profile

SECURITY_ALLOW = "allow"
SECURITY_REFUSE_OUT_OF_SCOPE = "out_of_scope_entity"
MASK = "[EXTERNAL]"
# Characters that render as nothing: dropped before matching, so "Glo\u200bbex" is "Globex".
_INVISIBLE = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u206f\ufeff"
)


def fold(text: str) -> tuple[str, list[int]]:
    """``text`` as the gate matches it: each character NFKC-normalised (full-width letters and digits, the
    ideographic space and compatibility forms become plain ones) and case-folded, invisible characters
    (zero-width space and joiners, soft hyphen, direction marks, BOM) dropped. Also the index in ``text``
    of each character of the result, so a match maps back to the original span."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch in _INVISIBLE:
            continue
        for piece in unicodedata.normalize("NFKC", ch).casefold():
            if piece not in _INVISIBLE:
                out.append(piece)
                where.append(i)
    return "".join(out), where


def _spaced(alias: str) -> str:
    """A pattern for ``alias`` (already folded) that also matches it with whitespace between any two of its
    characters ("环 球", "G l o b e x"); a space inside the alias matches any run of whitespace."""
    letters = [c for c in alias if not c.isspace()]
    return r"\s*".join(re.escape(c) for c in letters)


@dataclass(frozen=True)
class SecurityScreen:
    """What :meth:`SecurityGate.detect` found: the first external entity code (or None) and the text with
    every external alias replaced by ``[EXTERNAL]``."""

    external_entity: str | None
    masked_text: str


@dataclass(frozen=True)
class SecurityVerdict:
    """``decision`` is ``allow`` or ``out_of_scope_entity``; a refusal says why and how to narrow."""

    decision: str
    external_entity: str | None = None
    message: str | None = None
    narrowing_options: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return self.decision == SECURITY_ALLOW


@dataclass(frozen=True)
class RefusedVariant:
    """A generated text the gate refused, with the entity that caused it (reported, never retrieved)."""

    text: str
    external_entity: str


def _key(alias: str) -> str:
    """The lookup form of an alias or a matched span: folded, whitespace removed."""
    return "".join(c for c in fold(alias)[0] if not c.isspace())


class SecurityGate:
    """Screens texts against ``external_entities`` (alias → entity code; codes match too).

    ASCII aliases match case-insensitively on word boundaries, CJK aliases as substrings; the longest alias
    wins where aliases overlap. Spelling variants match too: full-width and other compatibility forms,
    any case, invisible characters and whitespace inside the name (``fold``, ``_spaced``). Raises
    ``ValueError`` for a mapping that is not str → non-empty str or a blank ``home_company_name``.
    """

    def __init__(self, external_entities: dict[str, str], home_company_name: str) -> None:
        if not isinstance(external_entities, Mapping):
            raise ValueError("external_entities must be a mapping of alias to entity code")
        if not isinstance(home_company_name, str) or not home_company_name.strip():
            raise ValueError("home_company_name must be a non-empty string")
        aliases: dict[str, str] = {}
        for alias, code in external_entities.items():
            if not isinstance(alias, str) or not isinstance(code, str) or not code.strip():
                raise ValueError(f"external entity {alias!r} → {code!r}: both must be non-empty strings")
            if alias.strip():
                aliases[_key(alias)] = code.strip()
        for code in {c.strip() for c in external_entities.values()}:
            aliases.setdefault(_key(code), code)
        aliases.pop("", None)
        self.external_entities = dict(external_entities)
        self.home_company_name = home_company_name.strip()
        parts = []
        self._codes: dict[str, str] = {}
        for alias in sorted(aliases, key=lambda a: (-len(a), a)):
            spaced = _spaced(alias)
            parts.append(rf"(?<![a-z0-9_]){spaced}(?![a-z0-9_])" if alias.isascii() else spaced)
            self._codes[alias] = aliases[alias]
        self._pattern = re.compile("|".join(parts)) if parts else None

    @classmethod
    def from_profile(cls, profile: DomainProfile | None = None) -> SecurityGate:
        """The gate of ``profile`` (default: the built-in profile)."""
        profile = profile or load_company_profile()
        return cls(dict(profile.external_entities), profile.home_company_name)

    def detect(self, text: str) -> SecurityScreen:
        """The first external entity named in ``text`` and the text with every such name masked."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        if self._pattern is None:
            return SecurityScreen(None, text)
        folded, where = fold(text)
        found: list[str] = []
        pieces: list[str] = []
        end = 0  # in ``text``
        for match in self._pattern.finditer(folded):
            found.append(self._codes[_key(match.group(0))])
            start, stop = where[match.start()], where[match.end() - 1] + 1
            pieces += [text[end:start], MASK]
            end = stop
        if not found:
            return SecurityScreen(None, text)
        pieces.append(text[end:])
        return SecurityScreen(found[0], "".join(pieces))

    def screen(self, *, raw_question: str, metric: str | None) -> SecurityVerdict:
        """Allow, or refuse a question about an external entity with a message and narrowing options."""
        entity = self.detect(raw_question).external_entity
        if entity is None:
            return SecurityVerdict(SECURITY_ALLOW)
        home = self.home_company_name
        if any("\u4e00" <= c <= "\u9fff" for c in raw_question):  # answered in the question's language
            figures = f"{entity}的{metric}数字" if metric else f"{entity}的对应数字"
            message = f"{entity}不在{home}的数据范围内，无法提供{figures}；只能查询{home}自身的数据。"
            options = [f"改问{home}的同一问题。"] + ([f"查询{home}的{metric}。"] if metric else [])
        else:
            figures = f"{metric} figures" if metric else "figures"
            message = (
                f"{entity} is outside {home}'s data: no {figures} for it; only {home}'s own can be retrieved."
            )
            options = [f"Ask the same question about {home}."] + (
                [f"Ask for {home}'s {metric}."] if metric else []
            )
        return SecurityVerdict(
            SECURITY_REFUSE_OUT_OF_SCOPE, external_entity=entity, message=message, narrowing_options=options
        )

    def split(self, texts: Iterable[str]) -> tuple[list[str], list[RefusedVariant]]:
        """``texts`` the gate allows (order kept) and the refused ones with their entity."""
        allowed: list[str] = []
        refused: list[RefusedVariant] = []
        for text in texts:
            entity = self.detect(text).external_entity
            if entity is None:
                allowed.append(text)
            else:
                refused.append(RefusedVariant(text, entity))
        return allowed, refused
