"""Glossary-driven multi-query expansion: swap an entity or metric name for its synonyms (zh + en).

Glossary file format (UTF-8 JSON)::

    {
      "entities": {"ACME_CN": ["ACME China", "ACME中国"]},
      "metrics":  {"营收": ["收入", "revenue", "sales"]}
    }

Each section maps a canonical name to a list of aliases; the canonical name and its aliases form one
synonym group. Both sections are optional, no other top-level key is allowed, and a surface form may
belong to only one group (compared case-insensitively for ASCII letters). The default glossary ships as
``ragspine/data/glossary.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

GLOSSARY_SECTIONS = ("entities", "metrics")
_ASCII_ALNUM = re.compile("[A-Za-z0-9]")
# ASCII letters only: "ＡＢＣ" or "É" are left alone, like the tokenizer does.
_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(surface: str) -> str:
    return surface.translate(_ASCII_UPPER)


@dataclass(frozen=True)
class SynonymGroup:
    """One concept: its canonical name, its aliases and the section (``entities``/``metrics``) it is in."""

    section: str
    canonical: str
    aliases: tuple[str, ...]

    @property
    def forms(self) -> tuple[str, ...]:
        """Every surface form, canonical first, then aliases in file order."""
        return (self.canonical, *self.aliases)


@dataclass(frozen=True)
class Glossary:
    """Validated synonym groups; build with ``from_mapping``, ``load_glossary`` or ``default_glossary``."""

    groups: tuple[SynonymGroup, ...]

    @classmethod
    def from_mapping(cls, data: object, *, source: str = "glossary") -> Glossary:
        """Validate a parsed glossary (the JSON object described in the module docstring).

        Raises ``ValueError`` starting with ``source`` and naming the offending section, entry or form:
        not an object, unknown section, a canonical name or alias that is blank or not a string, aliases
        not a list, or a surface form that appears twice.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: top level must be a JSON object, got {type(data).__name__}")
        unknown = sorted(str(k) for k in data if k not in GLOSSARY_SECTIONS)
        if unknown:
            raise ValueError(
                f"{source}: unknown section(s) {unknown}; allowed sections are {list(GLOSSARY_SECTIONS)}"
            )
        groups: list[SynonymGroup] = []
        owner: dict[str, str] = {}  # folded surface form -> where it was first defined
        for section in GLOSSARY_SECTIONS:
            entries = data.get(section, {})
            if not isinstance(entries, Mapping):
                raise ValueError(f"{source}: section {section!r} must be an object of canonical -> aliases")
            for canonical, aliases in entries.items():
                entry = f"{section}[{canonical!r}]"
                where = f"{source}: {entry}"
                if not isinstance(canonical, str) or not canonical.strip():
                    raise ValueError(f"{where}: canonical name must be a non-blank string")
                if not isinstance(aliases, list):
                    raise ValueError(
                        f"{where}: aliases must be a list of strings, got {type(aliases).__name__}"
                    )
                forms = [canonical.strip()]
                for alias in aliases:
                    if not isinstance(alias, str) or not alias.strip():
                        raise ValueError(f"{where}: alias {alias!r} must be a non-blank string")
                    forms.append(alias.strip())
                for form in forms:
                    folded = _fold(form)
                    if folded in owner:
                        raise ValueError(
                            f"{where}: surface form {form!r} is already defined in {owner[folded]}"
                        )
                    owner[folded] = entry
                groups.append(SynonymGroup(section=section, canonical=forms[0], aliases=tuple(forms[1:])))
        return cls(groups=tuple(groups))


def load_glossary(path: str | Path) -> Glossary:
    """Read and validate a glossary JSON file.

    Raises ``ValueError`` naming the path and the problem: missing or unreadable file, invalid UTF-8,
    invalid JSON (with line and column), or any content error listed in ``Glossary.from_mapping``.
    """
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ValueError(f"glossary file {str(file)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"glossary file {str(file)!r} is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"glossary file {str(file)!r} is not valid JSON: {exc.msg} "
            f"at line {exc.lineno} column {exc.colno}"
        ) from None
    return Glossary.from_mapping(data, source=f"glossary file {str(file)!r}")


def default_glossary() -> Glossary:
    """The finance glossary shipped with the package (``ragspine/data/glossary.json``)."""
    text = resources.files("ragspine").joinpath("data", "glossary.json").read_text(encoding="utf-8")
    return Glossary.from_mapping(json.loads(text), source="default glossary")


class GlossaryQueryRewriter:
    """Deterministic, rule-based multi-query expansion from a glossary (no model, no network).

    ``rewrite(query)`` returns the original query first, then variants in which one matched surface form
    is replaced by one of its synonyms. Matching scans left to right and takes the longest form at each
    position; ASCII letters match case-insensitively, and a form that starts or ends with an ASCII letter
    or digit only matches at a word edge (``sales`` does not match inside ``wholesales``). Variants are
    produced breadth-first, so with several matched concepts each gets its first synonym before any gets
    its second: round r takes, for each match in query order, the r-th other form of its group
    (canonical first, then aliases in file order). Duplicates are dropped and the list is capped at
    ``max_queries`` (the original included).

    Raises ``ValueError`` when ``max_queries < 1``; ``rewrite`` raises ``ValueError`` for a non-string.
    """

    def __init__(self, max_queries: int = 5, *, glossary: Glossary | None = None) -> None:
        if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
            raise ValueError(f"max_queries must be an integer >= 1, got {max_queries!r}")
        self.max_queries = max_queries
        self.glossary = default_glossary() if glossary is None else glossary
        self._group_of: dict[str, SynonymGroup] = {}
        alternatives: list[str] = []
        forms = [(form, group) for group in self.glossary.groups for form in group.forms]
        # Longest first: regex alternation takes the first alternative that matches at a position.
        for form, group in sorted(forms, key=lambda fg: (-len(fg[0]), fg[0])):
            self._group_of[_fold(form)] = group
            tail = "(?![A-Za-z0-9])" if _ASCII_ALNUM.match(form[-1]) else ""
            alternatives.append(re.escape(form) + tail)
        # The word-edge check before a form is done in ``_matches``, not as a look-behind: alternatives that
        # start with a literal let the regex engine skip ahead to positions where some form can start.
        self._pattern = re.compile("|".join(alternatives), re.IGNORECASE | re.ASCII) if alternatives else None

    def _matches(self, query: str) -> list[re.Match[str]]:
        """Non-overlapping form matches, left to right, longest form at each position; a form starting
        with an ASCII letter or digit only where no letter or digit precedes it."""
        assert self._pattern is not None
        out = []
        pos = 0
        while (match := self._pattern.search(query, pos)) is not None:
            start = match.start()
            # Every form that can start at ``start`` begins with the same character, so when the edge
            # check fails there, no form matches at ``start`` at all.
            if start > 0 and _ASCII_ALNUM.match(query[start]) and _ASCII_ALNUM.match(query[start - 1]):
                pos = start + 1
                continue
            out.append(match)
            pos = match.end()
        return out

    def rewrite(self, query: str) -> list[str]:
        """The original query followed by up to ``max_queries - 1`` synonym variants."""
        if not isinstance(query, str):
            raise ValueError(f"rewrite expects a query string, got {type(query).__name__}")
        out = [query]
        if self._pattern is None or self.max_queries == 1:
            return out
        options: list[tuple[int, int, list[str]]] = []
        for match in self._matches(query):
            surface = _fold(match.group(0))
            group = self._group_of[surface]
            synonyms = [form for form in group.forms if _fold(form) != surface]
            options.append((match.start(), match.end(), synonyms))
        seen = {query}
        rounds = max((len(syn) for _, _, syn in options), default=0)
        for r in range(rounds):
            for start, end, synonyms in options:
                if r >= len(synonyms):
                    continue
                variant = query[:start] + synonyms[r] + query[end:]
                if variant in seen:
                    continue
                seen.add(variant)
                out.append(variant)
                if len(out) == self.max_queries:
                    return out
        return out
