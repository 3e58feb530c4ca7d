"""Plain text and Markdown."""

from __future__ import annotations

import re

_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


def decode_utf8(data: bytes, *, source: str = "input") -> str:
    """Decode strict UTF-8 (a leading BOM is dropped); line endings become ``\\n``.

    Raises ``ValueError`` naming the byte offset when the data is not UTF-8.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{source} is not valid UTF-8 (bad byte at offset {exc.start}); re-save it as UTF-8"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def markdown_title(text: str) -> str:
    """The first Markdown heading's text, or "" when there is none."""
    for line in text.splitlines():
        match = _MD_HEADING.match(line)
        if match:
            return match.group(1).strip()
    return ""
