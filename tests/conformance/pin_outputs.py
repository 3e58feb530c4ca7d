# ruff: noqa: E501 (the frozen documents keep their real line lengths)
"""Record the retrieval outputs of a fixed configuration matrix, so a refactor can prove nothing changed.

Three surfaces, every retrieval mode preset, every chunker in the registry, three corpora:

- ``library``: ``assemble_index(store, Settings(...))`` + ``NarrativeIndex.ingest_many`` +
  ``NarrativeIndexRetriever.retrieve`` (snippet dicts, top 10);
- ``eval``: ``ragspine eval DIR --json --run-file`` through the CLI entry point (``ragspine.cli.main``) on a
  BEIR folder written from the subset: the per-query rankings of its run file and the figures it prints
  (minus the two throughput figures, which are timings);
- ``grpc``: a real loopback front (``build_front_parts`` + ``start_front``, models in process, the default
  background vector drainer), documents ingested over gRPC, the backlog of vectors drained
  (``pending_vectors == 0``), then ``Retrieve`` over gRPC (every field of every ``Snippet`` plus
  ``degraded`` / ``partial`` / ``pending_vectors`` / ``below_min_relevance`` / ``filter_fields``). A
  model-backed front gets one document per ``Ingest`` and its backlog drained before the next: the
  drainer may otherwise take a batch while a request is still writing, and a passage embedded in a batch
  of another shape gets a vector whose last bits differ (seen: ``vector`` scores 1 ulp apart between
  runs). An economy front has no vectors and gets all documents in one ``Ingest``.

Corpora: ``sample`` is the packaged sample corpus (``ragspine/data/sample_corpus``, its PDF through the
ingest parser, the RESTRICTED document included) plus four structured documents frozen below (a law in two
languages, an FAQ, a book chapter; one carries arbitrary metadata) so the laws / qa / book / layout
chunkers have structure to act on. ``scifact`` and ``cmrc`` are subsets of ``../shared/data``
(``subset_of``): the first judged queries, their relevant documents, and the first documents of the corpus
as distractors, kept in corpus order (SciFact: 20 queries, 29 documents; CMRC: 24 queries, one per
paragraph, 40 documents). Both stay small because the packaged models encode them (the English-only models
leave Chinese queries to BM25, but ``ragspine eval``'s warm-up still encodes the CMRC passages).

Matrix (``MATRIX``; every configuration is one entry of the pinned file):

- library / sample / economy x every chunker of the registry, ``small_to_big`` (an alias of parent_child)
  included (semantic uses the packaged MiniLM, as assembly resolves it);
- library / {sample, scifact, cmrc} / every mode x default chunker;
- eval / {scifact, cmrc} / every mode;
- grpc / sample / economy x every rule-based chunker; grpc / sample / auto x {default, semantic} (the
  semantic chunker reuses the front's embedding model); grpc / sample / every mode, and for the
  model-backed fronts also the request mode LEXICAL (``+lexical``); grpc / scifact / every mode.

Every model runs on the CPU (``device="cpu"``, also ``RAGSPINE_DEVICE=cpu`` for the CLI), and the
``RAGSPINE_*`` environment is cleared while recording, so settings come only from here.

What is stored (``tests/conformance/pinned/retrieval_outputs.json``): per configuration the sha256 of the
canonical JSON of all its answers, and per query the sha256 of its answer plus 16-hex digests of its parts
(``ids``: the ranking; ``scores``: every score field; ``provenance``: every other snippet field, text
included; ``other``: the response fields that are not snippets) so a failure says which query changed and
how. Canonical JSON: keys sorted, every float written as ``float.hex`` (any bit change shows), ints as ints.

Regenerate (prints each configuration as it is recorded)::

    RAGSPINE_SHARED_DATA=../shared/data .venv/bin/python -m tests.conformance.pin_outputs           # compare only
    RAGSPINE_SHARED_DATA=../shared/data .venv/bin/python -m tests.conformance.pin_outputs --write --overwrite

``--write`` refuses to replace an existing pinned file without ``--overwrite``; ``--out FILE`` writes a
recording elsewhere (e.g. to compare two processes).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNED_FILE = Path(__file__).resolve().parent / "pinned" / "retrieval_outputs.json"
FORMAT = 1
REGENERATE = (
    "RAGSPINE_SHARED_DATA=/path/to/shared/data .venv/bin/python -m tests.conformance.pin_outputs "
    "--write --overwrite"
)

MODES: tuple[str, ...] = ("economy", "auto", "sparse", "hybrid_sparse")
MODEL_MODES = frozenset({"auto", "sparse", "hybrid_sparse"})
# The registry's names when this file was pinned (a test checks the registry still lists exactly these).
CHUNKERS: tuple[str, ...] = (
    "default",
    "semantic",
    "layout",
    "parent_child",
    "small_to_big",  # an alias of parent_child in the registry: pinned as its own name
    "sentence_window",
    "laws",
    "qa",
    "book",
)
MODEL_CHUNKERS = frozenset({"semantic"})
TOP_K = 10
GRPC_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 300.0
SCORE_KEYS = frozenset({"scores", "relevance", "score"})
# Figures ``ragspine eval --json`` prints that measure time, not retrieval.
EVAL_TIMING_FIELDS = frozenset({"queries_per_s", "ingest_docs_per_s"})

# --------------------------------------------------------------------------------------------- corpora

EN_LAW = """Harvest Robotics Safety Act

Chapter 1 General Provisions
Article 1 This Act sets the minimum safety duties of anyone who builds, tests or services an agricultural robot in the Province.
Article 2 This Act applies to every employer with at least one robot in operation; it does not apply to research prototypes that never leave a laboratory.
Chapter 2 Duties of Employers
Article 3 An employer shall fence the working area of a robot arm during commissioning. No person may enter the fenced area until the emergency stop is pressed and a personal lock is applied.
Article 4 An employer shall hold a fire drill every month and keep a record of it for three years.
Chapter 3 Penalties
Article 5 A breach of Article 3 is punishable by a fine of up to fifty thousand euros.
"""

ZH_LAW = """流明田机器人安全生产条例

第一章 总则
第一条 为了加强机器人生产安全管理，防止和减少生产安全事故，保障人民群众生命和财产安全，制定本条例。
第二条 在本市行政区域内从事农业机器人生产、调试和维修活动的单位，适用本条例。
第二章 安全保障
第三条 生产经营单位应当具备本条例和有关法律、法规规定的安全生产条件；不具备安全生产条件的，不得从事生产经营活动。
第四条 机械臂调试期间，工作区域应当设置围栏。调试人员进入围栏前，应当按下急停按钮并挂上个人锁。
第五条 生产经营单位应当每月组织一次消防演习。
第三章 法律责任
第六条 违反本条例第四条规定的，由安全生产监督管理部门责令限期改正，可以处五万元以下的罚款。
"""

EN_FAQ = """# Harvest Arm H2 FAQ
Q: How long does the battery last?
A: About ten hours, which covers one full picking shift.
The battery can be swapped in under two minutes without tools.
Q: Which crops can the H2 pick?
A: Greenhouse tomatoes today; sweet peppers follow in 2027.
Can I buy spare grippers separately?
Yes. Spare grippers are sold through the service portal and ship within five working days.
"""

EN_BOOK = """## Chapter 1: Seeds

In the early morning the first row of tomatoes in the greenhouse had turned red. Lin Lan pushed the harvest arm to the end of the aisle and switched on its camera.

The arm rose slowly, like a careful hand. It stopped in front of a truss and decided which fruit was ripe.

## Chapter 2: Harvest

By noon the arm had picked more than a thousand tomatoes. Lin Lan wrote the bruising rate in her notebook: 0.7 percent.

Next year, she thought, they might try sweet peppers.
"""


@dataclass(frozen=True)
class StructuredDoc:
    doc_id: str
    title: str
    text: str
    language: str
    topic: str
    metadata: Mapping[str, str | float] | None = None


STRUCTURED_DOCS: tuple[StructuredDoc, ...] = (
    StructuredDoc(
        "en-law", "Harvest Robotics Safety Act", EN_LAW, "en", "law", {"department": "legal", "year": 2026.0}
    ),
    StructuredDoc("zh-law", "流明田机器人安全生产条例", ZH_LAW, "zh", "law"),
    StructuredDoc("en-faq", "Harvest Arm H2 FAQ", EN_FAQ, "en", "product"),
    StructuredDoc("en-book", "Harvest Arm: a story", EN_BOOK, "en", "story"),
)

Filters = Mapping[str, str] | None
# (key, query, filters on the fixed metadata fields)
SAMPLE_QUERIES: tuple[tuple[str, str, Filters], ...] = (
    ("s01", "harvest arm battery life and swap time", None),
    ("s02", "how many tomatoes per hour does the H2 pick", None),
    ("s03", "remote work allowance for home internet", None),
    ("s04", "emergency stop and personal lock during commissioning", None),
    ("s05", "board restructuring layoffs BLUE HERON", None),  # the RESTRICTED document's words
    ("s06", "机械臂调试 急停按钮", None),
    ("s07", "第三季度 交付 温室", None),
    ("s08", "fire drill record three years", None),
    ("s09", "spare grippers service portal", None),
    ("s10", "Chapter 2 harvest bruising rate", None),
    ("s11", "fine of up to fifty thousand euros", None),
    ("s12", "违反本条例 罚款", None),
    ("s13", "safety rules for visitors", {"language": "zh"}),
    ("s14", "safety", {"topic": "safety"}),
    ("s15", "Lumenfield Robotics", {"geography": "NL"}),
    ("s16", "sweet peppers", {"topic": "nothing-matches-this"}),
)


@dataclass(frozen=True)
class SubsetSpec:
    folder: str  # under shared/data; also the dataset name ``ragspine eval`` prints
    queries: int  # judged queries, in query-file order
    distractors: int  # the first documents of the corpus added to the relevant ones
    one_query_per_doc: bool  # CMRC asks several questions per paragraph: keep the first of each


SUBSETS: dict[str, SubsetSpec] = {
    "scifact": SubsetSpec("scifact", queries=20, distractors=10, one_query_per_doc=False),
    "cmrc": SubsetSpec("cmrc2018_dev", queries=24, distractors=40, one_query_per_doc=True),
}


@dataclass(frozen=True)
class Subset:
    name: str
    folder: str
    docs: list[Any]  # ragspine.ingest.beir.BeirDocument, in corpus order
    queries: list[tuple[str, str]]
    qrels: dict[str, dict[str, int]]


def shared_data_dir() -> Path:
    """``$RAGSPINE_SHARED_DATA``, else ``../shared/data`` beside the repository (as tests/conftest.py)."""
    return Path(os.environ.get("RAGSPINE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def subset_of(name: str, shared_data: Path) -> Subset:
    """The pinned subset ``name`` of its shared data set (deterministic: file order only)."""
    from ragspine.eval.beir import load_beir

    spec = SUBSETS[name]
    dataset = load_beir(shared_data / spec.folder)
    queries: list[tuple[str, str]] = []
    covered: set[str] = set()
    for qid, text in dataset.judged_queries():
        relevant = sorted(d for d, r in dataset.qrels[qid].items() if r > 0)
        if spec.one_query_per_doc and covered.issuperset(relevant):
            continue
        queries.append((qid, text))
        covered.update(relevant)
        if len(queries) == spec.queries:
            break
    docs = [d for i, d in enumerate(dataset.corpus) if i < spec.distractors or d.doc_id in covered]
    missing = covered - {d.doc_id for d in docs}
    if missing:
        raise ValueError(f"{spec.folder}: relevant documents missing from the corpus: {sorted(missing)[:5]}")
    qrels = {qid: dict(dataset.qrels[qid]) for qid, _ in queries}
    return Subset(name, spec.folder, docs, queries, qrels)


def sample_library_documents() -> list[tuple[str, Any]]:
    """(text, DocumentMeta) of the sample corpus (manifest order) followed by the structured documents."""
    from ragspine.retrieval.chunking.types import DocumentMeta
    from ragspine.retrieval.filtering.doc_metadata import encode_metadata
    from ragspine.samples import sample_documents

    docs: list[tuple[str, Any]] = list(sample_documents())
    for d in STRUCTURED_DOCS:
        meta = DocumentMeta(
            doc_id=d.doc_id,
            title=d.title,
            topic=d.topic,
            entity="Lumenfield Robotics",
            geography="NL",
            period="2026",
            language=d.language,
            sensitivity="PUBLIC",
            source_locator_prefix=f"{d.doc_id}.txt",
            metadata_json=encode_metadata(d.metadata) if d.metadata else "",
        )
        docs.append((d.text, meta))
    return docs


def sample_wire_documents() -> list[Any]:
    """The same documents as gRPC ``Document`` messages: sample files as bytes (the front parses them, the
    PDF included) with their manifest metadata, structured documents as text with a metadata map."""
    from ragspine.samples import SAMPLE_DIR
    from ragspine_services._gen import retrieval_pb2 as pb

    manifest = json.loads((SAMPLE_DIR / "manifest.json").read_text(encoding="utf-8"))
    docs = []
    for entry in manifest["documents"]:
        path = SAMPLE_DIR / entry["path"]
        fields = {k: v for k, v in entry.items() if k != "path"}
        docs.append(
            pb.Document(
                file=path.read_bytes(), filename=path.name, source_locator_prefix=entry["path"], **fields
            )
        )
    for d in STRUCTURED_DOCS:
        doc = pb.Document(
            doc_id=d.doc_id,
            title=d.title,
            text=d.text,
            topic=d.topic,
            entity="Lumenfield Robotics",
            geography="NL",
            period="2026",
            language=d.language,
            sensitivity="PUBLIC",
            source_locator_prefix=f"{d.doc_id}.txt",
        )
        for key, value in (d.metadata or {}).items():
            if isinstance(value, str):
                doc.metadata[key].string_value = value
            else:
                doc.metadata[key].number_value = value
        docs.append(doc)
    return docs


# ------------------------------------------------------------------------------------ canonical digests


def canonical_value(value: Any) -> Any:
    """JSON-ready copy of ``value``: floats as ``float.hex`` strings (every bit), tuples as lists."""
    if isinstance(value, float):  # before int: bool is an int, never a float
        return "f:" + float(value).hex()
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical_value(v) for v in value]
    raise TypeError(f"cannot pin a {type(value).__name__}: {value!r}")


def canonical_bytes(value: Any) -> bytes:
    return json.dumps(
        canonical_value(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode()


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def _short(value: Any) -> str:
    return digest(value)[:16]


@dataclass(frozen=True)
class Entry:
    """One recorded answer: ``key`` names the query in its configuration, ``query`` is its text."""

    key: str
    query: str
    answer: dict[str, Any]


def answer_parts(answer: Mapping[str, Any]) -> dict[str, str]:
    """The digest of the whole answer and of its parts (ranking, scores, provenance, the rest)."""
    snippets = answer.get("snippets", [])
    return {
        "answer": digest(answer),
        "ids": _short([[s.get("doc_id", ""), s.get("chunk_id", ""), s.get("rank", "")] for s in snippets]),
        "scores": _short([{k: v for k, v in s.items() if k in SCORE_KEYS} for s in snippets]),
        "provenance": _short([{k: v for k, v in s.items() if k not in SCORE_KEYS} for s in snippets]),
        "other": _short({k: v for k, v in answer.items() if k != "snippets"}),
    }


def pin_config(entries: Sequence[Entry]) -> dict[str, Any]:
    """What the pinned file keeps for one configuration."""
    keys = [e.key for e in entries]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate query keys: {keys}")
    return {
        "digest": digest([[e.key, e.answer] for e in entries]),
        "answers": len(entries),
        "snippets": sum(len(e.answer.get("snippets", ())) for e in entries),
        "queries": {e.key: answer_parts(e.answer) for e in entries},
    }


def compare_config(name: str, pinned: Mapping[str, Any] | None, entries: Sequence[Entry]) -> str | None:
    """None when ``entries`` reproduce ``pinned``; else one message naming the configuration, how many
    answers changed, and the first changed query with what changed in it."""
    if pinned is None:
        return f"{name}: not in the pinned file (new configuration?); regenerate with: {REGENERATE}"
    fresh = pin_config(entries)
    if fresh["digest"] == pinned["digest"]:
        return None
    old: Mapping[str, Mapping[str, str]] = pinned["queries"]
    changed = [e for e in entries if old.get(e.key, {}).get("answer") != fresh["queries"][e.key]["answer"]]
    gone = [k for k in old if k not in fresh["queries"]]
    lines = [
        f"{name}: output changed: {len(changed)} of {len(entries)} answers differ"
        + (f", {len(gone)} pinned queries not asked ({gone[:3]})" if gone else "")
        + f" (snippets: {fresh['snippets']} now, {pinned['snippets']} pinned)"
    ]
    if changed:
        first = changed[0]
        before = old.get(first.key)
        if before is None:
            what = "the query was not pinned"
        else:
            now = fresh["queries"][first.key]
            parts = [p for p in ("ids", "scores", "provenance", "other") if before.get(p) != now[p]]
            what = "changed: " + (", ".join(parts) if parts else "the answer (its parts' digests agree)")
        shown = [
            [s.get("chunk_id") or s.get("doc_id"), s.get("scores", s.get("score"))]
            for s in first.answer.get("snippets", [])[:3]
        ]
        lines.append(f"  first differing query {first.key!r} ({first.query[:80]!r}): {what}")
        lines.append(f"  its answer now starts {json.dumps(shown, ensure_ascii=False, default=str)[:400]}")
    elif not gone:
        lines.append("  every answer matches but their order differs")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- recording


@contextlib.contextmanager
def clean_environment() -> Iterator[None]:
    """No ``RAGSPINE_*`` setting leaks in from the caller; models on the CPU (the CLI reads the env)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("RAGSPINE_")}
    try:
        for key in saved:
            if key != "RAGSPINE_SHARED_DATA":
                del os.environ[key]
        os.environ["RAGSPINE_DEVICE"] = "cpu"
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("RAGSPINE_")]:
            del os.environ[key]
        os.environ.update(saved)


def _settings(mode: str, chunker: str = "default", **extra: Any) -> Any:
    from ragspine.settings import Settings

    return Settings(
        retrieval_mode=mode, chunker=chunker, embedding="auto", reranker="none", device="cpu", **extra
    )


def _check_models(index: Any, mode: str) -> None:
    """A model-backed preset must have got its packaged model (``auto`` quietly falls back to BM25)."""
    from ragspine.retrieval.mode import make_retrieval_mode

    preset = make_retrieval_mode(mode)
    if preset.uses_embedding and index.embedding_backend is None:
        raise RuntimeError(f"mode {mode!r}: no embedding backend (is the models extra installed?)")
    if preset.uses_sparse and index.retriever.sparse_encoder is None:
        raise RuntimeError(f"mode {mode!r}: no sparse encoder (is the models extra installed?)")


def _library_answers(
    tmp: Path,
    mode: str,
    chunker: str,
    docs: Sequence[tuple[str, Any]],
    queries: Sequence[tuple[str, str, Filters]],
) -> list[Entry]:
    from ragspine.retrieval.assembly import assemble_index
    from ragspine.retrieval.chunking.chunk_store import ChunkStore
    from ragspine.retrieval.link.narrative_link import NarrativeIndexRetriever

    store = ChunkStore(tmp / f"library-{mode}-{chunker}.db")
    try:
        store.init_schema()
        index = assemble_index(store, _settings(mode, chunker))
        _check_models(index, mode)
        index.ingest_many(docs)
        retriever = NarrativeIndexRetriever(index)
        out = []
        for key, query, filters in queries:
            snippets = retriever.retrieve(query, filters=dict(filters) if filters else None, top_k=TOP_K)
            out.append(Entry(key, query, {"snippets": snippets}))
        return out
    finally:
        store.close()


def _sample_queries() -> list[tuple[str, str, Filters]]:
    return list(SAMPLE_QUERIES)


def _subset_queries(subset: Subset) -> list[tuple[str, str, Filters]]:
    return [(qid, text, None) for qid, text in subset.queries]


def _subset_library_docs(subset: Subset) -> list[tuple[str, Any]]:
    from ragspine.retrieval.chunking.types import DocumentMeta

    return [
        (
            d.text,
            DocumentMeta(doc_id=d.doc_id, title=d.title, source_locator_prefix=f"{subset.name}/{d.doc_id}"),
        )
        for d in subset.docs
    ]


def write_beir_folder(subset: Subset, root: Path) -> Path:
    """The subset as a BEIR folder named like its data set (``ragspine eval`` prints that name)."""
    folder = root / subset.folder
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in subset.docs:
            fh.write(
                json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n"
            )
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in subset.queries:
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (folder / "qrels.tsv").open("w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, rels in subset.qrels.items():
            for doc_id, score in rels.items():
                fh.write(f"{qid}\t{doc_id}\t{score}\n")
    return folder


def _eval_answers(tmp: Path, subset: Subset, mode: str) -> list[Entry]:
    from ragspine.cli import main

    root = tmp / f"eval-{subset.name}-{mode}"
    folder = write_beir_folder(subset, root)
    run_file = root / "run.trec"
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = ["eval", str(folder), "--mode", mode, "--json", "--no-progress", "--run-file", str(run_file)]
    argv += ["--work-dir", str(root / "work")]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"ragspine {' '.join(argv)} exited {code}: {stderr.getvalue()[-2000:]}")
    figures = json.loads(stdout.getvalue().strip().splitlines()[-1])
    for field in EVAL_TIMING_FIELDS:
        figures.pop(field)
    rankings: dict[str, list[dict[str, Any]]] = {qid: [] for qid, _ in subset.queries}
    for line in run_file.read_text(encoding="utf-8").splitlines():
        qid, q0, doc_id, rank, score, tag = line.split(" ")
        rankings[qid].append({"doc_id": doc_id, "rank": int(rank), "score": score, "q0": q0, "tag": tag})
    out = [Entry("_figures", "ragspine eval --json", {"figures": figures})]
    out += [Entry(qid, text, {"snippets": rankings[qid]}) for qid, text in subset.queries]
    return out


# gRPC ------------------------------------------------------------------------------------------------


def _message_dict(message: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return dict(MessageToDict(message, preserving_proto_field_name=True))


class _Front:
    """A loopback front with models in process, and a stub to it."""

    def __init__(self, tmp: Path, mode: str) -> None:
        import grpc

        from ragspine_services._gen import retrieval_pb2_grpc
        from ragspine_services.front.server import build_front_parts, start_front

        self.models = mode in MODEL_MODES
        self.settings = _settings(mode, data_dir=str(tmp / f"front-{mode}"))
        self.parts = build_front_parts(self.settings)
        try:
            self.running = start_front(self.settings, self.parts, host="127.0.0.1", port=0)
        except BaseException:
            self.parts.close()
            raise
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.running.port}")
        self.stub = retrieval_pb2_grpc.RetrievalServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.running.stop(0)
        self.parts.close()

    def ingest(self, library: str, documents: Sequence[Any], chunker: str = "") -> None:
        """Economy: one Ingest of every document. Model-backed: one Ingest per document, each followed by
        the drain of its vectors, so the drainer's batches hold exactly one document's chunks. (With many
        documents per request the drainer may take a batch while the request is still writing chunks, and
        a passage embedded in a batch of another length gets a vector that differs in its last bits.)"""
        from ragspine_services._gen import retrieval_pb2 as pb

        if not self.models:
            self.stub.Ingest(
                pb.IngestRequest(library=library, documents=documents, chunker=chunker),
                timeout=GRPC_TIMEOUT_S,
            )
            return
        for document in documents:
            self.stub.Ingest(
                pb.IngestRequest(library=library, documents=[document], chunker=chunker),
                timeout=GRPC_TIMEOUT_S,
            )
            self.drain()

    def drain(self) -> None:
        """Wait until no library has chunks awaiting vectors: answers must not depend on drainer timing."""
        from ragspine_services._gen import retrieval_pb2 as pb

        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            libraries = self.stub.ListLibraries(pb.ListLibrariesRequest(), timeout=GRPC_TIMEOUT_S).libraries
            if sum(lib.pending_vectors for lib in libraries) == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"vector backlog not drained within {DRAIN_TIMEOUT_S} s")
            time.sleep(0.01)

    def answers(
        self, library: str, queries: Sequence[tuple[str, str, Filters]], request_mode: str = "UNSPECIFIED"
    ) -> list[Entry]:
        """Retrieve every query from ``library`` (``request_mode``: a ``RetrievalMode`` name; UNSPECIFIED =
        the front's preset)."""
        from ragspine_services._gen import retrieval_pb2 as pb

        mode = pb.RetrievalMode.Value(f"RETRIEVAL_MODE_{request_mode}")

        out = []
        for key, query, filters in queries:
            conditions = [
                pb.FilterCondition(field=f, op="eq", string_value=v) for f, v in (filters or {}).items()
            ]
            request = pb.RetrieveRequest(
                query=query, libraries=[library], filters=conditions, top_k=TOP_K, mode=mode
            )
            response = self.stub.Retrieve(request, timeout=GRPC_TIMEOUT_S)
            if response.degraded or response.partial or response.pending_vectors:
                raise RuntimeError(
                    f"{library} {key}: a degraded/partial answer ({list(response.degraded)}, partial="
                    f"{response.partial}, pending={response.pending_vectors}) depends on timing; not pinned"
                )
            answer = {
                "snippets": [_message_dict(s) for s in response.snippets],
                "degraded": list(response.degraded),
                "partial": response.partial,
                "pending_vectors": int(response.pending_vectors),
                "below_min_relevance": int(response.below_min_relevance),
                "filter_fields": [_message_dict(f) for f in response.filter_fields],
            }
            out.append(Entry(key, query, answer))
        return out


@contextlib.contextmanager
def _front(tmp: Path, mode: str) -> Iterator[_Front]:
    front = _Front(tmp, mode)
    try:
        yield front
    finally:
        front.close()


def grpc_sample_chunkers(mode: str) -> list[str]:
    """One library per chunker on the sample front: every rule-based chunker on the economy front, the
    semantic chunker on the auto front (it reuses the front's embedding model), default elsewhere."""
    if mode == "economy":
        return [c for c in CHUNKERS if c not in MODEL_CHUNKERS]
    if mode == "auto":
        return ["default", "semantic"]
    return ["default"]


def _grpc_sample(tmp: Path, mode: str) -> dict[str, list[Entry]]:

    queries = _sample_queries()
    docs = sample_wire_documents()
    chunkers = grpc_sample_chunkers(mode)
    out: dict[str, list[Entry]] = {}
    with _front(tmp, mode) as front:
        for chunker in chunkers:
            front.ingest(f"sample-{chunker}", docs, chunker="" if chunker == "default" else chunker)
        front.drain()
        for chunker in chunkers:
            out[f"grpc/sample/{mode}/{chunker}"] = front.answers(f"sample-{chunker}", queries)
        if mode in MODEL_MODES:
            lexical = front.answers("sample-default", queries, request_mode="LEXICAL")
            out[f"grpc/sample/{mode}/default+lexical"] = lexical
    return out


def _grpc_subset(tmp: Path, mode: str, subset: Subset) -> list[Entry]:
    from ragspine_services._gen import retrieval_pb2 as pb

    docs = [
        pb.Document(
            doc_id=d.doc_id, title=d.title, text=d.text, source_locator_prefix=f"{subset.name}/{d.doc_id}"
        )
        for d in subset.docs
    ]
    with _front(tmp, mode) as front:
        front.ingest(subset.name, docs)
        front.drain()
        return front.answers(subset.name, _subset_queries(subset))


# ---------------------------------------------------------------------------------------------- matrix


@dataclass(frozen=True)
class Group:
    """Configurations recorded together (one index, one CLI run or one front); one test case each."""

    name: str
    configs: tuple[str, ...]
    corpus: str  # "sample" or a SUBSETS key (needs the shared data)
    models: bool  # loads a packaged model
    run: Callable[[Path, Subset | None], dict[str, list[Entry]]]


def _library_group(corpus: str, mode: str, chunkers: Sequence[str]) -> Group:
    configs = tuple(f"library/{corpus}/{mode}/{c}" for c in chunkers)

    def run(tmp: Path, subset: Subset | None) -> dict[str, list[Entry]]:
        if subset is None:
            docs, queries = sample_library_documents(), _sample_queries()
        else:
            docs, queries = _subset_library_docs(subset), _subset_queries(subset)
        return {
            f"library/{corpus}/{mode}/{c}": _library_answers(tmp, mode, c, docs, queries) for c in chunkers
        }

    models = mode in MODEL_MODES or any(c in MODEL_CHUNKERS for c in chunkers)
    name = f"library-{corpus}-{mode}" + (
        "-" + "-".join(chunkers) if len(chunkers) == 1 and chunkers[0] != "default" else ""
    )
    if len(chunkers) > 1:
        name = f"library-{corpus}-{mode}-chunkers"
    return Group(name, configs, corpus, models, run)


def _eval_group(corpus: str, mode: str) -> Group:
    def run(tmp: Path, subset: Subset | None) -> dict[str, list[Entry]]:
        assert subset is not None
        return {f"eval/{corpus}/{mode}": _eval_answers(tmp, subset, mode)}

    return Group(f"eval-{corpus}-{mode}", (f"eval/{corpus}/{mode}",), corpus, mode in MODEL_MODES, run)


def _grpc_sample_group(mode: str) -> Group:
    chunkers = grpc_sample_chunkers(mode)
    configs = [f"grpc/sample/{mode}/{c}" for c in chunkers]
    if mode in MODEL_MODES:
        configs.append(f"grpc/sample/{mode}/default+lexical")
    return Group(
        f"grpc-sample-{mode}",
        tuple(configs),
        "sample",
        mode in MODEL_MODES,
        lambda tmp, _: _grpc_sample(tmp, mode),
    )


def _grpc_subset_group(corpus: str, mode: str) -> Group:
    def run(tmp: Path, subset: Subset | None) -> dict[str, list[Entry]]:
        assert subset is not None
        return {f"grpc/{corpus}/{mode}/default": _grpc_subset(tmp, mode, subset)}

    return Group(
        f"grpc-{corpus}-{mode}", (f"grpc/{corpus}/{mode}/default",), corpus, mode in MODEL_MODES, run
    )


def build_matrix() -> tuple[Group, ...]:
    rule_based = [c for c in CHUNKERS if c not in MODEL_CHUNKERS]
    groups = [
        _library_group("sample", "economy", rule_based),
        _library_group("sample", "economy", ["semantic"]),
    ]
    groups += [_library_group("sample", m, ["default"]) for m in MODES if m != "economy"]
    for corpus in SUBSETS:
        groups += [_library_group(corpus, m, ["default"]) for m in MODES]
    for corpus in SUBSETS:
        groups += [_eval_group(corpus, m) for m in MODES]
    groups += [_grpc_sample_group(m) for m in MODES]
    groups += [_grpc_subset_group("scifact", m) for m in MODES]
    names = [g.name for g in groups]
    assert len(set(names)) == len(names), names
    return tuple(groups)


MATRIX: tuple[Group, ...] = build_matrix()
GROUPS: dict[str, Group] = {g.name: g for g in MATRIX}
ALL_CONFIGS: tuple[str, ...] = tuple(c for g in MATRIX for c in g.configs)


def record_group(group: Group, tmp: Path, shared_data: Path | None = None) -> dict[str, list[Entry]]:
    """Run ``group`` in a clean environment; returns configuration -> answers (in query order)."""
    subset = None
    if group.corpus != "sample":
        if shared_data is None:
            raise ValueError(f"{group.name} needs the shared data (corpus {group.corpus!r})")
        subset = subset_of(group.corpus, shared_data)
    with clean_environment():
        recorded = group.run(tmp, subset)
    if set(recorded) != set(group.configs):
        raise AssertionError(f"{group.name} recorded {sorted(recorded)}, expected {sorted(group.configs)}")
    return {c: recorded[c] for c in group.configs}


def load_pinned(path: Path = PINNED_FILE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(
            f"{path}: format {data.get('format')!r}, expected {FORMAT}; regenerate: {REGENERATE}"
        )
    return data


def _environment() -> dict[str, str]:
    """Informational: what produced the pinned file (a mismatch after an upgrade may be the upgrade)."""
    from importlib import metadata

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for dist in (
        "numpy",
        "scipy",
        "onnxruntime",
        "tokenizers",
        "torch",
        "transformers",
        "grpcio",
        "protobuf",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.conformance.pin_outputs",
        description="Record the pinned retrieval outputs and compare them with the pinned file.",
    )
    parser.add_argument("--write", action="store_true", help=f"write the recording to {PINNED_FILE.name}")
    parser.add_argument("--overwrite", action="store_true", help="with --write: replace an existing file")
    parser.add_argument("--out", type=Path, default=None, help="write the recording to this file instead")
    parser.add_argument("--only", default="", help="record only the groups matching this glob (no --write)")
    parser.add_argument("--list", action="store_true", help="list the groups and their configurations")
    args = parser.parse_args(argv)
    if args.list:
        for g in MATRIX:
            flags = ",".join(f for f, on in (("data", g.corpus != "sample"), ("models", g.models)) if on)
            print(f"{g.name}  [{flags or '-'}]\n    " + "\n    ".join(g.configs))
        return 0
    groups = [g for g in MATRIX if not args.only or fnmatch.fnmatch(g.name, args.only)]
    if args.only and args.write:
        parser.error("--write records the whole matrix; drop --only (or use --out)")
    if args.write and PINNED_FILE.exists() and not args.overwrite:
        print(f"{PINNED_FILE} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    shared = shared_data_dir()
    if any(g.corpus != "sample" for g in groups) and not shared.is_dir():
        print(f"shared data not found at {shared} (set RAGSPINE_SHARED_DATA)", file=sys.stderr)
        return 2
    pinned = load_pinned() if PINNED_FILE.exists() else None
    configs: dict[str, Any] = {}
    problems: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ragspine-pin-") as tmp:
        for i, group in enumerate(groups, 1):
            t0 = time.perf_counter()
            print(f"[{i}/{len(groups)}] {group.name} ...", file=sys.stderr, flush=True)
            folder = Path(tmp) / group.name
            folder.mkdir()
            recorded = record_group(group, folder, shared)
            for name, entries in recorded.items():
                configs[name] = pin_config(entries)
                status = ""
                if pinned is not None:
                    problem = compare_config(name, pinned["configs"].get(name), entries)
                    status = "  same as pinned" if problem is None else "  CHANGED"
                    if problem:
                        problems.append(problem)
                print(
                    f"    {name}: {len(entries)} answers, {configs[name]['snippets']} snippets, "
                    f"{configs[name]['digest'][:16]}{status}",
                    file=sys.stderr,
                )
            print(f"    ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    print(f"recorded {len(configs)} configurations in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    data = {
        "format": FORMAT,
        "about": "Retrieval outputs pinned before the core refactor (tests/conformance/pin_outputs.py). "
        f"Regenerate: {REGENERATE}",
        "environment": _environment(),
        "top_k": TOP_K,
        "configs": configs,
    }
    target = args.out or (PINNED_FILE if args.write else None)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        print(f"wrote {target} ({target.stat().st_size} bytes)", file=sys.stderr)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems and target is None else 0


if __name__ == "__main__":
    raise SystemExit(main())
