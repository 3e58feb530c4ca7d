"""Document parsers: plain text, Markdown, PDF text layer, the office / web / mail / data formats of
``ragspine.ingest.formats``, zip archives (``ragspine.ingest.archive``) and BEIR jsonl corpora.

Every parser returns text whose paragraphs are separated by blank lines (what the chunker expects) and
raises ``ValueError`` with an actionable message for input it cannot read (invalid UTF-8, a corrupt or
encrypted PDF, a malformed jsonl line).
"""

from ragspine.ingest.beir import iter_beir_jsonl
from ragspine.ingest.parsers import ParsedDocument, detect_kind, parse_bytes, parse_file

__all__ = ["ParsedDocument", "detect_kind", "iter_beir_jsonl", "parse_bytes", "parse_file"]
