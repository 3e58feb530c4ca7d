"""``ragspine ingest PATH... --library L``: add txt, md, pdf files and BEIR jsonl corpora to a library.

Folders are walked recursively. A ``manifest.json`` in a folder supplies per-file metadata
(``{"documents": [{"path", "doc_id", "title", "topic", ..., "sensitivity"}]}``); flags fill in the rest.
Works on ``--data-dir`` directly, or through a running front with ``--server host:port``.

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
from pathlib import Path
from typing import Any

_FILE_SUFFIXES = {".txt", ".text", ".md", ".markdown", ".pdf"}
_META_FLAGS = ("topic", "entity", "geography", "period", "language")
_DOC_FIELDS = {"doc_id", "title", "sensitivity", "source_locator_prefix", "valid_as_of", *_META_FLAGS}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("ingest", help="ingest files (txt, md, pdf) or BEIR jsonl into a library")
    parser.add_argument("paths", nargs="+", help="files or folders")
    parser.add_argument("--library", required=True, help="target library id (created on first use)")
    parser.add_argument(
        "--sensitivity", default=None, help="label for every document (e.g. PUBLIC, RESTRICTED)"
    )
    for name in _META_FLAGS:
        parser.add_argument(f"--{name}", default=None, help=f"{name} label for every document")
    parser.add_argument("--limit", type=int, default=None, help="at most this many records per jsonl file")
    parser.add_argument("--server", default=None, help="host:port of a running front (default: in-process)")
    parser.add_argument("--token", default=None, help="bearer token for --server (RAGSPINE_TOKEN)")
    parser.add_argument("--data-dir", default=None, help="data folder for in-process ingest")
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
    parser.set_defaults(func=_run)


def _manifest(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / "manifest.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(entry["path"]): dict(entry) for entry in data["documents"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is not a valid manifest ({exc}); expected {{'documents': [{{'path': ...}}]}}"
        ) from None


def _files(paths: list[str]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            manifest = _manifest(path)
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix.lower() in {*_FILE_SUFFIXES, ".jsonl"}:
                    yield child, manifest.get(child.relative_to(path).as_posix(), {})
        elif path.is_file():
            yield path, _manifest(path.parent).get(path.name, {})
        else:
            raise FileNotFoundError(f"no such file or folder: {raw}")


def _requests(args: argparse.Namespace) -> Iterator[Any]:
    from ragspine.ingest import iter_beir_jsonl
    from ragspine_services._gen import retrieval_pb2

    defaults = {name: getattr(args, name) for name in _META_FLAGS if getattr(args, name)}
    if args.sensitivity:
        defaults["sensitivity"] = args.sensitivity
    for path, meta in _files(args.paths):
        fields = {**defaults, **{k: v for k, v in meta.items() if k != "path" and k in _DOC_FIELDS}}
        if path.suffix.lower() == ".jsonl":
            for record in iter_beir_jsonl(path, limit=args.limit):
                doc = retrieval_pb2.Document(
                    doc_id=record.doc_id, title=record.title, text=record.text, **defaults
                )
                yield retrieval_pb2.IngestStreamRequest(library=args.library, document=doc)
            continue
        fields.setdefault("doc_id", path.stem)
        fields.setdefault("source_locator_prefix", path.name)
        if getattr(args, "pages", False) and path.suffix.lower() == ".pdf":
            fields.update(pages=True, page_dpi=args.page_dpi)
        doc = retrieval_pb2.Document(file=path.read_bytes(), filename=path.name, **fields)
        yield retrieval_pb2.IngestStreamRequest(library=args.library, document=doc)


def _run(args: argparse.Namespace) -> int:
    import os

    from tqdm import tqdm

    from ragspine.settings import Settings
    from ragspine_services.client import LocalFront, RemoteFront

    front: Any
    if args.server:
        token = args.token or os.environ.get("RAGSPINE_TOKEN", "")
        front = RemoteFront(args.server, token=token, timeout_s=3600.0)
    else:
        # --wait fills the vectors here, so it needs the models; a plain ingest stores text only.
        front = LocalFront(Settings.from_env(data_dir=args.data_dir), load_models=bool(args.wait))
    try:
        with tqdm(unit="doc", desc=f"ingest → {args.library}", file=sys.stderr, disable=None) as bar:

            def counted() -> Iterator[Any]:
                for request in _requests(args):
                    yield request
                    bar.update(1)

            response = front.IngestStream(counted())
        _print_ingested(args, response)
        if args.wait:
            wait_for_vectors(front, args.library)
    finally:
        front.close()
    return 0


def _print_ingested(args: argparse.Namespace, response: Any) -> None:
    written = sum(r.chunks_written for r in response.results)
    unchanged = sum(1 for r in response.results if r.chunks_written == 0)
    print(
        f"ingested {len(response.results)} documents into {args.library!r}: {written} chunks written, "
        f"{unchanged} unchanged ({response.timings.total_ms / 1000:.1f} s)"
    )
    pages = sum(r.pages_indexed for r in response.results)
    if pages:
        print(f"{pages} pages rendered and indexed for visual retrieval")
    pending = sum(r.chunks_pending_vectors for r in response.results)
    if pending:
        print(f"{pending} chunks await vectors (searchable lexically now; hybrid fills in as they are made)")


def _library_pending(front: Any, library: str) -> int:
    from ragspine_services._gen import retrieval_pb2

    for entry in front.ListLibraries(retrieval_pb2.ListLibrariesRequest()).libraries:
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
