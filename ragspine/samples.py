"""The sample corpus that ships inside the package (a fictional company, English and Chinese, one PDF).

``manifest.json`` beside the documents gives each one's doc_id, title, metadata and sensitivity; at least
one document is RESTRICTED so that the demo shows it never comes back.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragspine.ingest.parsers import parse_file
from ragspine.retrieval.chunking.types import DocumentMeta

SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "sample_corpus"
_META_FIELDS = ("title", "topic", "entity", "geography", "period", "language", "sensitivity")


def sample_manifest(folder: Path = SAMPLE_DIR) -> list[tuple[Path, dict[str, str]]]:
    """(file path, metadata fields incl. doc_id and source_locator_prefix) for every manifest entry."""
    manifest_path = folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{manifest_path} is missing; the sample corpus is incomplete") from None
    entries = []
    for entry in manifest["documents"]:
        fields = {k: str(entry[k]) for k in _META_FIELDS if entry.get(k)}
        fields["doc_id"] = str(entry["doc_id"])
        fields["source_locator_prefix"] = str(entry["path"])
        entries.append((folder / entry["path"], fields))
    return entries


def sample_documents(folder: Path = SAMPLE_DIR) -> list[tuple[str, DocumentMeta]]:
    """(text, meta) for every document the manifest lists, parsed with the regular ingest parsers."""
    docs = []
    for path, fields in sample_manifest(folder):
        parsed = parse_file(path)
        fields.setdefault("title", parsed.title)
        docs.append((parsed.text, DocumentMeta(**fields)))
    return docs
