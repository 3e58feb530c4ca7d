"""``ragspine ingest PATH... --library L``: add files (txt, md, pdf, docx, pptx, xlsx, csv, html, epub, eml,
json, zip, ... see ``docs/formats.md``) and BEIR corpora to a library.

Document ids: a file given by name gets its stem (``notes.txt`` -> ``notes``); a file found in a folder
gets its path relative to that folder without the suffix (``a/notes.txt`` -> ``a/notes``), so files with the
same name in different subfolders never collide. ``manifest.json`` overrides them (see ``MANIFEST_HELP``).
A folder holding ``corpus.jsonl`` is a BEIR dataset: only the corpus is ingested (never queries.jsonl or
qrels). Works on ``--data-dir`` directly, or through a running front with ``--server host:port``.

Each file has its own outcome: stored, replaced, unchanged, or failed with its reason (a file of a type
that cannot be ingested, one that cannot be read or parsed); the good ones are stored, a summary names the
failures, and the command exits 1 when any file failed (0 otherwise). Nothing is skipped without a word.

Ingest returns once the text is stored (searchable lexically at once); vectors are made in the background.
``--wait`` then shows progress until the library's vectors are ready (a bar on a terminal, a line every
few seconds otherwise). Without ``--server`` it loads the configured models and fills them in-process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragspine.cli.front_access import FrontAccess, add_connection_args
from ragspine.ingest.parsers import SUFFIXES

# Every type the parsers read (ragspine.ingest.parsers.SUFFIXES); a .jsonl file is a BEIR corpus when its
# first record has "_id" (and is then read as one), otherwise a document.
_FILE_SUFFIXES = frozenset(SUFFIXES)
_META_FLAGS = ("topic", "entity", "geography", "period", "language")
_MANIFEST_FIELDS = (
    "path",
    "doc_id",
    "title",
    *_META_FLAGS,
    "sensitivity",
    "source_locator_prefix",
    "valid_as_of",
    "metadata",
)
_BEIR_SKIP = {"queries.jsonl"}

MANIFEST_HELP = """\
manifest.json: a folder (or a file's folder) may hold a manifest giving each file's fields:
  {"documents": [{"path": "a/notes.txt", "doc_id": "team-a-notes", "title": "Team A notes",
                  "topic": "hr", "language": "en", "sensitivity": "INTERNAL",
                  "metadata": {"dept": "ops", "pages": 12, "tags": ["x", "y"],
                               "signed": {"date": "2024-06-30"}}}]}
  "path" is relative to the manifest's folder; every other key is optional: doc_id, title, topic, entity,
  geography, period, language, sensitivity, source_locator_prefix, valid_as_of, metadata (strings, numbers,
  string lists, {"date": ISO 8601}). Flags (--topic ...) fill in what an entry leaves out.
Document ids: a file named on the command line gets its stem; a file found in a folder gets its path
relative to that folder without the suffix (a/notes.txt -> a/notes). A folder with corpus.jsonl is a BEIR
dataset: only corpus.jsonl is ingested."""


@dataclass
class Source:
    """One file to send: a document file, or a BEIR corpus (``beir``) yielding many documents."""

    path: Path
    label: str
    doc_id: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    beir: bool = False
    unsupported: str = ""  # why the file cannot be ingested (its type); it is reported, never sent


def _unsupported(path: Path) -> str:
    kinds = ", ".join(sorted(s.lstrip(".") for s in _FILE_SUFFIXES))
    return f"unsupported file type {path.suffix or '(no suffix)'}; ingestible: {kinds}"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "ingest",
        help="ingest files (txt, md, pdf, docx, pptx, xlsx, csv, html, eml, zip, ...) or a BEIR corpus",
        description="Ingest files (txt, md, pdf, docx, pptx, xlsx, xls, csv, html, xml, epub, eml, msg, "
        "json, ipynb, rst; a zip's members each as a document), folders and BEIR corpora into a library.",
        epilog=MANIFEST_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", help="files or folders")
    parser.add_argument("--library", required=True, help="target library id (created on first use)")
    parser.add_argument(
        "--sensitivity", default=None, help="label for every document (e.g. PUBLIC, RESTRICTED)"
    )
    for name in _META_FLAGS:
        parser.add_argument(f"--{name}", default=None, help=f"{name} label for every document")
    parser.add_argument("--limit", type=int, default=None, help="at most this many records per jsonl file")
    add_connection_args(parser, what="ingest")
    parser.add_argument(
        "--pages",
        action="store_true",
        help="also render every PDF page and index it for visual retrieval (needs RAGSPINE_VISUAL_EMBEDDER; "
        "RESTRICTED documents are never rendered)",
    )
    parser.add_argument(
        "--page-dpi", type=int, default=0, help="rendering resolution for --pages (10-600; default 100)"
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="after ingesting, show progress until every chunk has its vectors (hybrid answers complete)",
    )
    parser.add_argument(
        "--chunker",
        default="",
        help="the library's chunker (default, layout, parent_child, sentence_window, semantic, laws, qa, "
        "book, ...): stored by the first ingest that names one and used for later ingests; a different "
        "one later is refused",
    )
    parser.add_argument(
        "--contextual",
        default="",
        choices=("", "none", "header", "document"),
        help="the library's contextual index text (RAGSPINE_CONTEXTUAL): fixed while the library is empty, "
        "refused once it holds chunks indexed otherwise",
    )
    parser.add_argument("--json", action="store_true", help="print the response as JSON (snake_case)")
    parser.set_defaults(func=_run)


def _manifest(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / "manifest.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = {str(entry["path"]): dict(entry) for entry in data["documents"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is not a valid manifest ({type(exc).__name__}: {exc}); expected "
            '{"documents": [{"path": ..., "doc_id": ...}]} (see ragspine ingest --help)'
        ) from None
    for name, entry in entries.items():
        unknown = sorted(set(entry) - set(_MANIFEST_FIELDS))
        if unknown:
            raise ValueError(
                f"{path}: entry {name!r} has unknown keys {unknown}; allowed: {', '.join(_MANIFEST_FIELDS)}"
            )
        if not (folder / name).is_file():
            raise ValueError(f"{path}: entry {name!r} names no file in {folder}")
    return entries


def _is_beir_folder(folder: Path) -> bool:
    return (folder / "corpus.jsonl").is_file()


def _is_beir_jsonl(path: Path) -> bool:
    """A BEIR corpus (or queries) file: its first record is an object with an ``_id``."""
    if path.name in ("corpus.jsonl", *_BEIR_SKIP):
        return True
    try:
        with path.open("rb") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and "_id" in record
    except (OSError, ValueError):
        return False
    return False


def _from_folder(folder: Path) -> list[Source]:
    if _is_beir_folder(folder):
        return [Source(folder / "corpus.jsonl", f"{folder}/corpus.jsonl", beir=True)]
    manifest = _manifest(folder)
    sources = []
    for child in sorted(folder.rglob("*")):
        if not child.is_file():
            continue
        suffix = child.suffix.lower()
        rel = child.relative_to(folder).as_posix()
        if suffix == ".jsonl" and _is_beir_jsonl(child):
            # A nested BEIR dataset contributes its corpus only.
            if child.name == "corpus.jsonl" or (
                not _is_beir_folder(child.parent) and child.name not in _BEIR_SKIP
            ):
                sources.append(Source(child, str(child), beir=True))
            continue
        if child.name.startswith(".") or child.name == "manifest.json":
            continue  # hidden files and the manifest are not documents
        if suffix not in _FILE_SUFFIXES:
            sources.append(Source(child, str(child), doc_id=rel, unsupported=_unsupported(child)))
            continue
        entry = manifest.get(rel, {})
        doc_id = entry.get("doc_id") or rel[: -len(child.suffix)]
        sources.append(Source(child, str(child), doc_id=doc_id, fields=entry))
    return sources


def discover(paths: list[str]) -> list[Source]:
    """Every source the paths name, checked before anything is sent (missing paths, clashing ids)."""
    sources: list[Source] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            sources += _from_folder(path)
        elif path.is_file():
            if path.suffix.lower() == ".jsonl" and _is_beir_jsonl(path):
                if path.name in _BEIR_SKIP:
                    raise ValueError(f"{raw} holds BEIR queries, not documents; ingest corpus.jsonl instead")
                sources.append(Source(path, raw, beir=True))
                continue
            if path.suffix.lower() not in _FILE_SUFFIXES:
                sources.append(Source(path, raw, doc_id=path.name, unsupported=_unsupported(path)))
                continue
            entry = _manifest(path.parent).get(path.name, {})
            sources.append(Source(path, raw, doc_id=entry.get("doc_id") or path.stem, fields=entry))
        else:
            raise FileNotFoundError(f"no such file or folder: {raw}")
    seen: dict[str, str] = {}
    for source in sources:
        if source.beir or source.unsupported:
            continue
        if source.doc_id in seen:
            raise ValueError(
                f"doc_id {source.doc_id!r} would come from both {seen[source.doc_id]} and {source.label}; "
                "give one of them its own doc_id in manifest.json (see ragspine ingest --help)"
            )
        seen[source.doc_id] = source.label
    return sources


def _metadata(raw: Any, where: str) -> dict[str, Any]:
    """A manifest entry's metadata; ``{"date": "2024-06-30"}`` marks a date (the server checks it)."""
    from ragspine_client import MetaDate

    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: manifest metadata must be an object of key: value")
    return {
        key: MetaDate(str(value["date"])) if isinstance(value, dict) and set(value) == {"date"} else value
        for key, value in raw.items()
    }


def documents(
    args: argparse.Namespace,
    sources: list[Source],
    labels: dict[str, str],
    not_sent: list[tuple[str, str]] | None = None,
) -> Iterator[Any]:
    """Client ``Document``s for every source, read lazily; ``labels`` maps each doc_id to its file. A
    source that cannot be sent (an unsupported type, a file that cannot be read) is added to ``not_sent``
    as ``(file, reason)`` and left out."""
    skipped = [] if not_sent is None else not_sent
    from ragspine.ingest import iter_beir_jsonl
    from ragspine_client import Document

    defaults: dict[str, Any] = {name: getattr(args, name) for name in _META_FLAGS if getattr(args, name)}
    if args.sensitivity:
        defaults["sensitivity"] = args.sensitivity
    for source in sources:
        if source.unsupported:
            skipped.append((source.label, source.unsupported))
            continue
        if source.beir:
            for record in iter_beir_jsonl(source.path, limit=args.limit):
                labels[record.doc_id] = source.label
                yield Document(record.doc_id, text=record.text, title=record.title, **defaults)
            continue
        entry = {k: v for k, v in source.fields.items() if k not in ("path", "doc_id", "metadata")}
        fields = {**defaults, **entry}
        fields.setdefault("source_locator_prefix", source.path.name)
        if getattr(args, "pages", False) and source.path.suffix.lower() == ".pdf":
            fields.update(pages=True, page_dpi=args.page_dpi)
        try:
            data = source.path.read_bytes()
        except OSError as exc:
            skipped.append((source.label, f"cannot read it: {exc.strerror or exc}"))
            continue
        labels[source.doc_id] = source.label
        yield Document(
            source.doc_id,
            file=data,
            filename=source.path.name,
            metadata=_metadata(source.fields.get("metadata"), source.label),
            **fields,
        )


class _Capturing:
    """Iterates ``items`` for the RPC; an error raised while reading is kept so the command can report it
    (the RPC itself only sees the stream break)."""

    def __init__(self, items: Iterator[Any], progress: Any) -> None:
        self._items = items
        self._progress = progress
        self.error: BaseException | None = None

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self._items:
                yield item
                self._progress.update(1)
        except Exception as exc:
            self.error = exc
            raise


def _run(args: argparse.Namespace) -> int:
    from ragspine.cli.progress import Progress

    sources = discover(args.paths)
    beir = [s.label for s in sources if s.beir and s.path.name == "corpus.jsonl"]
    if beir:
        print(
            f"BEIR corpus: ingesting {', '.join(beir)} (queries and qrels are not documents)", file=sys.stderr
        )
    labels: dict[str, str] = {}
    not_sent: list[tuple[str, str]] = []
    if all(s.unsupported for s in sources):
        for source in sources:
            print(f"failed: {source.label}: {source.unsupported}", file=sys.stderr)
        print(f"nothing ingested into {args.library!r}: {len(sources)} files failed", file=sys.stderr)
        return 1
    # --wait without --server fills the vectors here, so it needs the models; a plain ingest stores text.
    front = FrontAccess(args, load_models=bool(args.wait) and not args.server, timeout_s=3600.0)
    try:
        with Progress(f"ingest → {args.library}") as progress:
            stream = _Capturing(documents(args, sources, labels, not_sent), progress)
            try:
                result = front.ingest_stream(
                    args.library, iter(stream), chunker=args.chunker, contextual=args.contextual
                )
            except Exception:
                if stream.error is not None:
                    raise stream.error from None
                for label, reason in not_sent:  # the files that were never sent still get their line
                    print(f"failed: {label}: {reason}", file=sys.stderr)
                if not labels and not_sent:  # nothing could be sent at all
                    print(
                        f"nothing ingested into {args.library!r}: {len(not_sent)} files failed",
                        file=sys.stderr,
                    )
                    return 1
                raise
        failed = _print_ingested(args, result, labels, not_sent)
        if args.wait:
            wait_for_vectors(front, args.library)
    finally:
        front.close()
    return 1 if failed else 0


def _print_ingested(
    args: argparse.Namespace,
    result: Any,
    labels: dict[str, str],
    not_sent: list[tuple[str, str]] | None = None,
) -> int:
    """Print the outcome (a summary, or JSON with ``--json``); returns how many files failed."""
    not_sent = not_sent or []
    failures = [
        (labels.get(r.doc_id, r.doc_id or f"document {r.index}"), r.error) for r in result.results if r.failed
    ]
    failures += not_sent
    if args.json:
        payload = result.to_dict()
        payload["not_sent"] = [{"file": label, "error": reason} for label, reason in not_sent]
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return len(failures)
    for r in result.results:
        if r.replaced:
            print(f"replaced the stored version of {r.doc_id!r} with {labels.get(r.doc_id, r.doc_id)}")
    stored = [r for r in result.results if not r.failed]
    written = sum(r.chunks_written for r in stored)
    unchanged = sum(1 for r in stored if r.chunks_written == 0 and r.pages_indexed == 0)
    replaced = sum(1 for r in stored if r.replaced)
    failed = f", {len(failures)} failed" if failures else ""
    print(
        f"ingested {len(stored)} documents into {args.library!r}: {written} chunks written, "
        f"{replaced} replaced, {unchanged} unchanged{failed} ({result.total_ms / 1000:.1f} s)"
    )
    pages = sum(r.pages_indexed for r in stored)
    if pages:
        print(f"{pages} pages rendered and indexed for visual retrieval")
    pending = sum(r.chunks_pending_vectors for r in stored)
    if pending:
        print(f"{pending} chunks await vectors (searchable lexically now; hybrid fills in as they are made)")
    for label, reason in failures:
        print(f"failed: {label}: {reason}", file=sys.stderr)
    return len(failures)


def _library_pending(front: Any, library: str) -> int:
    for entry in front.list_libraries():
        if entry.library_id == library:
            return int(entry.pending_vectors)
    return 0


def wait_for_vectors(
    front: Any, library: str, *, poll_s: float = 0.5, line_every_s: float = 5.0, stream: Any = None
) -> None:
    """Poll the library's backlog until it is empty: a progress bar on a terminal, otherwise a line every
    ``line_every_s`` seconds (and one at the end)."""
    from tqdm import tqdm

    out = sys.stderr if stream is None else stream
    pending = _library_pending(front, library)
    total = pending
    tty = bool(getattr(out, "isatty", lambda: False)())
    started = last_line = time.monotonic()
    with tqdm(total=total, unit="chunk", desc=f"vectors → {library}", file=out, disable=not tty) as bar:
        while pending:
            if not tty and time.monotonic() - last_line >= line_every_s:
                ready = total - pending
                print(f"vectors for {library!r}: {ready}/{total} ready, {pending} pending", file=out)
                last_line = time.monotonic()
            time.sleep(poll_s)
            pending = _library_pending(front, library)
            if pending > total:  # more arrived meanwhile (another writer)
                total = pending
                bar.total = total
            bar.n = total - pending
            bar.refresh()
    print(f"vectors for {library!r} ready ({time.monotonic() - started:.1f} s)", file=out)
