"""Controlled-vocabulary multi-query expansion: a matched term becomes its controlled code, then its synonyms.

The vocabulary comes from the domain profile (``ragspine.common.company_profile``; the built-in default or
the TOML file named by ``RAGSPINE_COMPANY_CONFIG``): every entity code (home and external) and every code
of a dimension with ``expand = true`` (metric, channel, ...) forms one synonym group, the code first and its
surface forms after it. A legacy glossary JSON file (``RAGSPINE_GLOSSARY_PATH``) may be given instead::

    {
      "entities": {"ACME_CN": ["ACME China", "ACME中国"]},
      "metrics":  {"营收": ["收入", "revenue", "sales"]}
    }

There each section maps a canonical name (used as the code) to a list of aliases; both sections are
optional, no other top-level key is allowed, and a surface form may belong to only one group (compared
case-insensitively for ASCII letters). ``ragspine/data/glossary.json`` is a sample of that format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragspine.common.company_profile import DomainProfile

GLOSSARY_SECTIONS = ("entities", "metrics")
_ASCII_ALNUM = re.compile("[A-Za-z0-9]")
# ASCII letters only: "ＡＢＣ" or "É" are left alone, like the tokenizer does.
_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(surface: str) -> str:
    """``surface`` with A-Z lowered and every other character kept (same length, same positions)."""
    if surface.isascii():
        return surface.lower()  # on ASCII text exactly A-Z to a-z, and far cheaper than translate
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


def profile_glossary(profile: DomainProfile) -> Glossary:
    """The synonym groups of a domain profile: one group per controlled code, the code as its canonical
    name. Entities (section ``entities``) gather the home entity synonyms, the external entities and the
    home entity labels; each dimension with ``expand`` set (section = its name) gathers its synonyms and
    labels. Surface forms keep the profile's order; a form claimed by an earlier group is skipped there
    after (profiles are validated when loaded, so nothing here raises)."""
    owner: set[str] = set()
    order: list[tuple[str, str]] = []  # (section, code) in first-seen order
    forms: dict[tuple[str, str], list[str]] = {}

    def add(section: str, code: str, form: str) -> None:
        code, form = code.strip(), form.strip()
        if not code or not form:
            return
        key = (section, code)
        if key not in forms:
            forms[key] = []
            order.append(key)
            owner.add(_fold(code))
        if _fold(form) in owner:
            return
        owner.add(_fold(form))
        forms[key].append(form)

    add("entities", profile.home_entity_code, profile.home_company_name)
    for alias, code in profile.home_entity_synonyms.items():
        add("entities", code, alias)
    for code, label in profile.home_entity_labels.items():
        add("entities", code, label)
    for alias, code in profile.external_entities.items():
        add("entities", code, alias)
    for dim in profile.dimensions:
        if not dim.expand:
            continue
        for alias, code in dim.synonyms.items():
            add(dim.name, code, alias)
        for code, label in dim.labels.items():
            add(dim.name, code, label)
    groups = tuple(SynonymGroup(section, code, tuple(forms[(section, code)])) for section, code in order)
    return Glossary(groups=groups)


class GlossaryQueryRewriter:
    """Deterministic, rule-based multi-query expansion from the domain profile (no model, no network).

    ``rewrite(query)`` returns the original query first; then, for each matched term in query order, the
    query with that term replaced by its controlled code (``"营收在香港的表现"`` → ``"REVENUE在香港的表现"``,
    ``"营收在ACME_HK的表现"``); then variants in which one matched term is replaced by another surface form
    of the same code. Matching scans left to right and takes the longest form at each position; ASCII
    terms match case-insensitively on word boundaries (``sales`` does not match inside ``wholesales``),
    CJK terms as substrings. Synonym variants are produced breadth-first, so with several matched terms
    each gets its first synonym before any gets its second (forms in profile order). Duplicates are
    dropped and the list is capped at ``max_queries`` (the original included).

    The vocabulary is ``profile`` (``None``: the profile named by ``RAGSPINE_COMPANY_CONFIG`` through
    ``Settings``, else the built-in default) or, instead, a legacy ``glossary`` whose canonical names act
    as the codes. Raises ``ValueError`` when ``max_queries < 1`` or both are given; ``rewrite`` raises
    ``ValueError`` for a non-string.
    """

    def __init__(
        self,
        max_queries: int = 5,
        *,
        glossary: Glossary | None = None,
        profile: DomainProfile | None = None,
    ) -> None:
        if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
            raise ValueError(f"max_queries must be an integer >= 1, got {max_queries!r}")
        if glossary is not None and profile is not None:
            raise ValueError("give GlossaryQueryRewriter a profile or a glossary, not both")
        self.max_queries = max_queries
        if glossary is None:
            if profile is None:
                from ragspine.common.company_profile import profile_for

                profile = profile_for()
            glossary = profile_glossary(profile)
        self.glossary = glossary
        self._group_of: dict[str, SynonymGroup] = {}
        alternatives: list[str] = []
        forms = [(form, group) for group in self.glossary.groups for form in group.forms]
        # Longest first: regex alternation takes the first alternative that matches at a position.
        for form, group in sorted(forms, key=lambda fg: (-len(fg[0]), fg[0])):
            if _fold(form) in self._group_of:
                continue
            self._group_of[_fold(form)] = group
            tail = "(?![A-Za-z0-9])" if _ASCII_ALNUM.match(form[-1]) else ""
            alternatives.append(re.escape(_fold(form)) + tail)
        # The word-edge check before a form is done in ``_matches``, not as a look-behind: alternatives that
        # start with a literal let the regex engine skip ahead to positions where some form can start.
        # The pattern holds the folded forms and runs case-sensitively over the folded query: the same
        # matches as the forms under ASCII-only IGNORECASE (folding maps A-Z to a-z one character for one,
        # so positions are kept), several times cheaper for the regex engine.
        self._pattern = re.compile("|".join(alternatives), re.ASCII) if alternatives else None
        # Every match is one of these folded forms, so a query holding none of them as a substring has
        # no match; most queries hold none, and a substring test per form is cheaper than the regex scan.
        self._folded_forms = tuple(sorted(self._group_of, key=len))

    def _matches(self, query: str) -> list[tuple[int, int]]:
        """``(start, end)`` of the non-overlapping form matches, left to right, longest form at each
        position; a form starting with an ASCII letter or digit only where no letter or digit precedes it.
        ASCII letters match in either case."""
        assert self._pattern is not None
        folded = _fold(query)
        for form in self._folded_forms:
            if form in folded:
                break
        else:
            return []
        search = self._pattern.search
        out = []
        pos = 0
        while (match := search(folded, pos)) is not None:
            start = match.start()
            # Every form that can start at ``start`` begins with the same character, so when the edge
            # check fails there, no form matches at ``start`` at all.
            if start > 0 and _ASCII_ALNUM.match(folded[start]) and _ASCII_ALNUM.match(folded[start - 1]):
                pos = start + 1
                continue
            pos = match.end()
            out.append((start, pos))
        return out

    def rewrite(self, query: str) -> list[str]:
        """The original query followed by up to ``max_queries - 1`` code and synonym variants."""
        if not isinstance(query, str):
            raise ValueError(f"rewrite expects a query string, got {type(query).__name__}")
        out = [query]
        if self._pattern is None or self.max_queries == 1:
            return out
        matches: list[tuple[int, int, str, list[str]]] = []  # (start, end, code, synonyms)
        for start, end in self._matches(query):
            surface = _fold(query[start:end])
            group = self._group_of[surface]
            synonyms = [form for form in group.aliases if _fold(form) != surface]
            matches.append((start, end, group.canonical, synonyms))
        seen = {query}

        def emit(start: int, end: int, replacement: str) -> bool:
            variant = query[:start] + replacement + query[end:]
            if variant not in seen:
                seen.add(variant)
                out.append(variant)
            return len(out) >= self.max_queries

        for start, end, code, _ in matches:
            if _fold(query[start:end]) != _fold(code) and emit(start, end, code):
                return out
        rounds = max((len(syn) for *_, syn in matches), default=0)
        for r in range(rounds):
            for start, end, _, synonyms in matches:
                if r < len(synonyms) and emit(start, end, synonyms[r]):
                    return out
        return out
