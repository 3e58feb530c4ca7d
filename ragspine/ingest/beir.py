"""BEIR corpus files: one JSON object per line with ``_id``, ``title`` and ``text``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BeirDocument:
    doc_id: str
    title: str
    text: str


def iter_beir_jsonl(path: str | Path, *, limit: int | None = None) -> Iterator[BeirDocument]:
    """Yield the documents of a BEIR ``corpus.jsonl`` in file order (at most ``limit``).

    Raises ``ValueError`` naming the line number for invalid UTF-8, invalid JSON, or a record without a
    string ``_id`` and ``text``. Blank lines are skipped.
    """
    with open(path, "rb") as handle:
        yielded = 0
        for number, raw in enumerate(handle, start=1):
            if limit is not None and yielded >= limit:
                return
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{number}: not valid UTF-8") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object with _id and text")
            doc_id, text, title = record.get("_id"), record.get("text"), record.get("title", "")
            if not isinstance(doc_id, str) or not doc_id or not isinstance(text, str):
                raise ValueError(f"{path}:{number}: a record needs a string '_id' and a string 'text'")
            yield BeirDocument(doc_id, title if isinstance(title, str) else "", text)
            yielded += 1
