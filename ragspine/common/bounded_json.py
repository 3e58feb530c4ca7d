"""JSON from callers, parsed within bounds: nesting depth, integer size, no NaN, no lone surrogates.

``json.loads`` on hostile input fails in ways that are not ``JSONDecodeError``: a 100,000-deep array
raises ``RecursionError``, a 5,000-digit integer raises a bare ``ValueError`` from ``int()``, ``NaN`` and
``Infinity`` parse although JSON has neither, and ``"\\ud800"`` gives a string that no protobuf and no
UTF-8 writer accepts. :func:`loads` turns every one of them into a :class:`JsonLimitError` (a
``ValueError``) whose message says what to change, so every JSON route and every JSON file of facts
refuses them the same way (HTTP 400 / INVALID_ARGUMENT) instead of failing with an internal error.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_INT_DIGITS", "JsonLimitError", "check_text", "loads"]

# Deep enough for every message of the API (the deepest, a filter group inside a request, is < 10).
DEFAULT_MAX_DEPTH = 64
# Any 64-bit integer has at most 20 digits; facts may hold larger plain numbers, never 100 digits.
DEFAULT_MAX_INT_DIGITS = 100


class JsonLimitError(ValueError):
    """The JSON is malformed or outside the bounds; the message names the place and the bound."""


def _int(max_digits: int, where: str) -> Any:
    def parse(text: str) -> int:
        digits = len(text) - (text[0] == "-")
        if digits > max_digits:
            raise JsonLimitError(
                f"{where} holds an integer of {digits} digits; at most {max_digits} are accepted"
            )
        return int(text)

    return parse


def _constant(where: str) -> Any:
    def refuse(name: str) -> float:
        raise JsonLimitError(f"{where} is not valid JSON: {name} is not a JSON number")

    return refuse


def check_text(value: str, where: str) -> str:
    """``value`` unless it holds a lone surrogate (not encodable as UTF-8): then ``JsonLimitError``."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise JsonLimitError(
            f"{where} holds a lone surrogate ({value[exc.start]!r} at character {exc.start}); send text as "
            "valid UTF-8 (a surrogate pair, or the character itself)"
        ) from None
    return value


def _walk(root: Any, max_depth: int, where: str) -> None:
    """Check depth and strings without recursion (the parsed value may be as deep as the parser allowed)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            check_text(value, where)
        elif isinstance(value, dict | list):
            if depth > max_depth:
                raise JsonLimitError(f"{where} nests deeper than {max_depth} levels; flatten it")
            if isinstance(value, dict):
                for key, item in value.items():
                    check_text(key, where)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)


def loads(
    raw: bytes | str,
    *,
    where: str = "the body",
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_int_digits: int = DEFAULT_MAX_INT_DIGITS,
) -> Any:
    """Parse ``raw`` (UTF-8 bytes or text) as JSON within the bounds; ``JsonLimitError`` otherwise.

    ``where`` names the input in the message ("the body", "facts.json line 3"). Depth counts arrays and
    objects (``[[1]]`` is 2 deep); an integer may have at most ``max_int_digits`` digits.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise JsonLimitError(f"{where} is not UTF-8 text: {exc}") from None
    try:
        value = json.loads(text, parse_int=_int(max_int_digits, where), parse_constant=_constant(where))
    except JsonLimitError:
        raise
    except RecursionError:
        raise JsonLimitError(f"{where} nests deeper than {max_depth} levels; flatten it") from None
    except json.JSONDecodeError as exc:
        raise JsonLimitError(f"{where} is not valid JSON: {exc}") from None
    except ValueError as exc:  # e.g. int() refusing a number it cannot convert
        raise JsonLimitError(f"{where} is not valid JSON: {exc}") from None
    _walk(value, max_depth, where)
    return value
