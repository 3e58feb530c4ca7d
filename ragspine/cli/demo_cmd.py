"""``ragspine demo``: the main job on the embedded default, end to end, in one command.

Starts the front tier in laptop mode (one process, CPU, SQLite under the data dir, in-process models) on
a loopback port, ingests the bundled sample corpus over gRPC, asks a few English and Chinese questions
over gRPC and prints cited snippets; when the evaluation data sits beside the repository it also runs
the SciFact evaluation through the library API.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

DEMO_LIBRARY = "sample"
DEMO_QUESTIONS = (
    "How much does the Harvest Arm H2 weigh and what does it pick?",
    "What happens when a person enters the safety zone of the harvest arm?",
    "board restructuring layoffs",
    "第三季度营收为什么下滑？",
    "工厂安全事故",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="laptop mode end to end: ingest the sample corpus over gRPC, ask questions, print citations",
        description="Run the main job on the embedded default: SQLite store, CPU, packaged models.",
    )
    p.add_argument("--data-dir", default=None, help="where the SQLite stores go (default RAGSPINE_DATA_DIR)")
    p.add_argument("--top-k", type=int, default=3, help="snippets per question (default 3)")
    p.add_argument(
        "--eval-data",
        default=None,
        help="BEIR folder to evaluate after the demo (default: ../shared/data/scifact when present)",
    )
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation step")
    p.set_defaults(func=run)


def _print_snippet(rank: int, s: Any) -> None:
    body = " ".join(s.text.split())
    print(f"  [{rank}] {s.title or s.doc_id}  ({s.source_locator}, {s.sensitivity}, library {s.library_id})")
    print(textwrap.indent(textwrap.fill(body[:300], width=100), "      "))
    present = [f.name for f, _ in s.scores.ListFields()]  # only the stages that ran
    scores = ", ".join(f"{name}={getattr(s.scores, name):.4f}" for name in present)
    print(f"      scores: {scores}")


def _default_eval_data() -> Path | None:
    env = os.environ.get("RAGSPINE_SHARED_DATA")
    root = Path(env) if env else Path.cwd().parent / "shared" / "data"
    candidate = root / "scifact"
    return candidate if candidate.is_dir() else None


def _ingest_requests(library: str) -> Any:
    from ragspine.samples import sample_manifest
    from ragspine_services._gen import retrieval_pb2

    for path, fields in sample_manifest():
        doc = retrieval_pb2.Document(file=path.read_bytes(), filename=path.name)
        for name, value in fields.items():
            setattr(doc, name, value)
        yield retrieval_pb2.IngestStreamRequest(library=library, document=doc)


class _Libraries:
    """``list_libraries()`` (what ``wait_for_vectors`` polls) over a raw ``RetrievalService`` stub."""

    def __init__(self, front: Any) -> None:
        self._front = front

    def list_libraries(self) -> Any:
        from ragspine_services._gen import retrieval_pb2

        return self._front.ListLibraries(retrieval_pb2.ListLibrariesRequest()).libraries


def run_laptop_demo(data_dir: Path, *, top_k: int, settings: Any) -> int:
    """Serve laptop mode on a free loopback port, ingest and query over gRPC; returns restricted-hits seen."""
    from dataclasses import replace

    from ragspine.cli.ingest_cmd import wait_for_vectors
    from ragspine_services._gen import retrieval_pb2
    from ragspine_services.client import RemoteFront
    from ragspine_services.front.server import build_front_parts, start_front

    settings = replace(settings, data_dir=str(data_dir))
    print(f"starting laptop mode: SQLite under {data_dir}, retrieval mode {settings.retrieval_mode}, CPU")
    parts = build_front_parts(settings, in_process=True)
    running = start_front(settings, parts, host="127.0.0.1", port=0)
    address = f"127.0.0.1:{running.port}"
    front = RemoteFront(address, timeout_s=600.0)
    leaked = 0
    try:
        info = front.Info(retrieval_pb2.RetrievalServiceInfoRequest())
        print(f"front tier listening on {address} ({type(info).__name__} answered)")
        ingest = front.IngestStream(_ingest_requests(DEMO_LIBRARY))
        written = sum(r.chunks_written for r in ingest.results)
        print(f"ingested {len(ingest.results)} sample documents into {DEMO_LIBRARY!r} ({written} new chunks)")
        # Ingest returns once the text is durable; the answers below are hybrid once the vectors are in.
        wait_for_vectors(_Libraries(front), DEMO_LIBRARY, poll_s=0.1, stream=sys.stdout)
        print()
        for question in DEMO_QUESTIONS:
            response = front.Retrieve(
                retrieval_pb2.RetrieveRequest(query=question, libraries=[DEMO_LIBRARY], top_k=top_k)
            )
            flags = f"  [degraded: {', '.join(response.degraded)}]" if response.degraded else ""
            if response.partial:
                flags += f"  [partial: {response.pending_vectors} chunks still without vectors]"
            print(f"Q: {question}{flags}")
            if not response.snippets:
                print("  (no evidence found)")
            for rank, snippet in enumerate(response.snippets, 1):
                leaked += snippet.sensitivity.upper() == "RESTRICTED"
                _print_snippet(rank, snippet)
            print()
        print(f"RESTRICTED snippets returned: {leaked} (the sample corpus holds one RESTRICTED document)")
    finally:
        front.close()
        running.stop(1.0)
        parts.close()
    return leaked


def run(args: argparse.Namespace) -> int:
    from ragspine.settings import Settings

    settings = Settings.from_env(data_dir=args.data_dir)
    data_dir = Path(settings.data_dir) / "demo"
    data_dir.mkdir(parents=True, exist_ok=True)
    if run_laptop_demo(data_dir, top_k=args.top_k, settings=settings):
        return 1
    if args.no_eval:
        return 0
    eval_dir = Path(args.eval_data) if args.eval_data else _default_eval_data()
    if eval_dir is None:
        print("evaluation skipped: no ../shared/data/scifact beside the repository (pass --eval-data DIR)")
        return 0
    return _run_eval(eval_dir, settings)


def _run_eval(eval_dir: Path, settings: Any) -> int:
    from dataclasses import replace

    from ragspine.eval.harness import run_eval
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.chunking.store_protocol import VersionedChunkStore
    from ragspine.retrieval.lexical.narrative_index import NarrativeIndex
    from ragspine.settings import Settings

    print(f"\nevaluating on {eval_dir} (BM25, then the configured mode) ...")
    for mode in dict.fromkeys(["bm25", settings.retrieval_mode]):
        mode_settings = replace(settings, retrieval_mode=mode)

        def make_index(store: VersionedChunkStore, ms: Settings = mode_settings) -> NarrativeIndex:
            return assemble_index(store, ms, max_chars=1_000_000)

        result = run_eval(eval_dir, make_index=make_index, mode=mode, progress=sys.stderr.isatty())
        print(result.as_text())
    return 0
