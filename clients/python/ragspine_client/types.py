"""Typed inputs and results of the client (plain dataclasses; ``raw`` keeps the wire message)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from ragspine_client._gen import retrieval_pb2 as pb


@dataclass(frozen=True)
class MetaDate:
    """A date metadata value as an ISO 8601 string (how results carry dates; accepted on input too)."""

    iso: str


# A metadata value: a string, a number, a date (``datetime.date``/``datetime``/``MetaDate``) or a list of
# strings.
MetaValue = str | float | int | date | datetime | MetaDate | Sequence[str]


@dataclass(frozen=True)
class Filter:
    """One metadata condition ``field op value``.

    ``op``: eq ne in nin gt gte lt lte between, or contains, not_contains, starts_with, ends_with, empty,
    not_empty, before, after (Dify's spellings "is", "not in", "start with", "≥" ... work too). ``value``:
    a string, a number, a ``date``/``datetime`` (sent as an ISO 8601 date), or a list of strings or of
    numbers (in, nin, between; numbers for a number field); none for empty/not_empty. A field a document
    lacks never matches, except with ``empty``.
    """

    field: str
    op: str = "eq"
    value: Any = None

    def to_proto(self) -> pb.FilterCondition:
        cond = pb.FilterCondition(field=self.field, op=self.op)
        value = self.value
        if value is None:
            return cond
        if isinstance(value, bool):
            raise ValueError(f"filter {self.field}: a bool is not a filter value; use a string or number")
        if isinstance(value, int | float):
            cond.number_value = float(value)
        elif isinstance(value, datetime | date):
            cond.date_value = value.isoformat()
        elif isinstance(value, str):
            cond.string_value = value
        elif isinstance(value, Sequence):
            items = list(value)
            if items and all(isinstance(v, int | float) and not isinstance(v, bool) for v in items):
                # A number field is matched by numbers: [2021, 2022] travels as a number list.
                cond.number_list_value.values.extend(float(v) for v in items)
            elif all(isinstance(v, str) for v in items):
                cond.list_value.values.extend(items)
            else:
                raise ValueError(
                    f"filter {self.field}: a list value holds strings or numbers, not both: {value!r}"
                )
        else:
            raise ValueError(f"filter {self.field}: unsupported value {value!r}")
        return cond


@dataclass
class Document:
    """A document to ingest: ``text`` or ``file`` (bytes, with ``filename`` or ``mime_type``)."""

    doc_id: str
    text: str | None = None
    file: bytes | None = None
    filename: str = ""
    mime_type: str = ""
    title: str = ""
    topic: str = ""
    entity: str = ""
    geography: str = ""
    period: str = ""
    language: str = ""
    sensitivity: str = ""
    source_locator_prefix: str = ""
    valid_as_of: str = ""
    pages: bool = False
    page_dpi: int = 0
    metadata: Mapping[str, MetaValue] = field(default_factory=dict)

    @classmethod
    def from_path(cls, path: str | Path, doc_id: str | None = None, **fields: Any) -> Document:
        """A file document (txt, md, pdf) read from ``path``; ``doc_id`` defaults to the file's stem."""
        p = Path(path)
        return cls(doc_id=doc_id or p.stem, file=p.read_bytes(), filename=p.name, **fields)

    def to_proto(self) -> pb.Document:
        strings: tuple[str, ...] = (
            "doc_id",
            "filename",
            "mime_type",
            "title",
            "topic",
            "entity",
            "geography",
        )
        strings += ("period", "language", "sensitivity", "source_locator_prefix", "valid_as_of")
        doc = pb.Document(pages=self.pages, page_dpi=self.page_dpi, **{n: getattr(self, n) for n in strings})
        if self.text is not None:
            doc.text = self.text
        elif self.file is not None:
            doc.file = self.file
        for key, value in self.metadata.items():
            item = doc.metadata[key]
            if isinstance(value, bool):
                raise ValueError(f"metadata[{key!r}] is a bool; use a string or a number")
            if isinstance(value, int | float):
                item.number_value = float(value)
            elif isinstance(value, MetaDate):
                item.date_value = value.iso
            elif isinstance(value, datetime | date):
                item.date_value = value.isoformat()
            elif isinstance(value, str):
                item.string_value = value
            elif isinstance(value, Sequence):
                item.list_value.values.extend(str(v) for v in value)
            else:
                raise ValueError(f"metadata[{key!r}]: unsupported value {value!r}")
        return doc


def _metadata(values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(values):
        item = values[key]
        kind = item.WhichOneof("kind")
        if kind == "string_value":
            out[key] = item.string_value
        elif kind == "number_value":
            out[key] = item.number_value
        elif kind == "date_value":
            out[key] = MetaDate(item.date_value)
        elif kind == "list_value":
            out[key] = list(item.list_value.values)
    return out


@dataclass(frozen=True)
class Scores:
    """Per-stage scores; a stage that did not run is None."""

    bm25: float | None = None
    vector: float | None = None
    fused: float | None = None
    sparse: float | None = None
    rerank: float | None = None
    visual: float | None = None

    @classmethod
    def from_proto(cls, m: pb.Scores) -> Scores:
        names = ("bm25", "vector", "fused", "sparse", "rerank", "visual")
        return cls(**{n: (getattr(m, n) if m.HasField(n) else None) for n in names})  # type: ignore[arg-type]


@dataclass(frozen=True)
class Snippet:
    """One cited passage with its provenance."""

    text: str
    doc_id: str
    title: str
    source_locator: str
    chunk_id: str
    library_id: str
    scores: Scores
    topic: str = ""
    entity: str = ""
    geography: str = ""
    period: str = ""
    language: str = ""
    sensitivity: str = ""
    parent_id: str = ""
    heading: str = ""
    parent_locator: str = ""
    prompt_text: str = ""
    is_visual: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    is_synthesis: bool = False
    source_doc_ids: list[str] = field(default_factory=list)
    source_locators: list[str] = field(default_factory=list)
    relevance: float = 0.0  # calibrated 0-1, non-increasing down the answer

    @classmethod
    def from_proto(cls, m: pb.Snippet) -> Snippet:
        strings: tuple[str, ...] = ("text", "doc_id", "title", "source_locator", "chunk_id", "library_id")
        strings += ("topic", "entity")
        strings += ("geography", "period", "language", "sensitivity", "parent_id", "heading")
        strings += ("parent_locator", "prompt_text")
        return cls(
            scores=Scores.from_proto(m.scores),
            is_visual=m.is_visual,
            metadata=_metadata(m.metadata),
            is_synthesis=m.is_synthesis,
            source_doc_ids=list(m.source_doc_ids),
            source_locators=list(m.source_locators),
            relevance=m.relevance,
            **{n: getattr(m, n) for n in strings},
        )


STAGE_FIELDS: tuple[str, ...] = (
    "query_transform",
    "decompose",
    "adaptive",
    "corrective",
    "postprocessor",
    "judge",
    "library_router",
    "filter_extractor",
)


@dataclass(frozen=True)
class QueryStages:
    """The opt-in query stages of one Retrieve (all off when empty; the server names what it offers):
    ``query_transform`` ("hyde", "rag_fusion", "step_back"), ``decompose``, ``adaptive``, ``corrective``,
    ``postprocessor`` (e.g. "mmr,compress"), ``judge`` ("listwise"), ``library_router`` ("keyword",
    "llm") and ``filter_extractor``. A choice the server does not offer is ``InvalidArgument``."""

    query_transform: str = ""
    decompose: str = ""
    adaptive: str = ""
    corrective: str = ""
    postprocessor: str = ""
    judge: str = ""
    library_router: str = ""
    filter_extractor: str = ""

    def __post_init__(self) -> None:
        for name in STAGE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ValueError(f"QueryStages.{name} must be a string, got {value!r}")

    def fields(self) -> dict[str, str]:
        """The request fields to set (the non-empty choices)."""
        return {name: getattr(self, name) for name in STAGE_FIELDS if getattr(self, name)}


@dataclass(frozen=True)
class StageAction:
    """One step of the corrective loop: the grade it judged, what it did, the snippets it had."""

    action: str
    grade: float
    snippet_count: int


@dataclass(frozen=True)
class StageReport:
    """What one query stage did for the request (see ``QueryStageReport`` in the proto)."""

    stage: str
    variants_tried: list[str]
    variants_refused: list[str]
    actions: list[StageAction]
    route: str
    llm_calls: int
    llm_failures: int
    deadline_hit: bool
    degraded: bool
    refused: bool
    error: str
    steps: list[str]
    timings_ms: dict[str, float]

    @classmethod
    def from_proto(cls, m: pb.QueryStageReport) -> StageReport:
        return cls(
            stage=m.stage,
            variants_tried=list(m.variants_tried),
            variants_refused=[v.text for v in m.variants_refused],
            actions=[StageAction(a.action, a.grade, a.snippet_count) for a in m.actions],
            route=m.route,
            llm_calls=m.llm_calls,
            llm_failures=m.llm_failures,
            deadline_hit=m.deadline_hit,
            degraded=m.degraded,
            refused=m.refused,
            error=m.error,
            steps=list(m.steps),
            timings_ms=dict(m.timings_ms),
        )


@dataclass(frozen=True)
class FilterFieldReport:
    """How many candidate documents lacked a filtered field (only ``empty`` matches them)."""

    field: str
    documents_missing: int
    documents_checked: int


@dataclass(frozen=True)
class RetrieveResult:
    """The answer to a question: snippets best first, degraded stages, server time; ``partial`` when some
    chunks were still waiting for vectors (``pending_vectors`` of them) and were ranked lexically only."""

    snippets: list[Snippet]
    degraded: list[str]
    total_ms: float
    filter_fields: list[FilterFieldReport]
    raw: pb.RetrieveResponse = field(repr=False, compare=False)
    partial: bool = False
    pending_vectors: int = 0
    below_min_relevance: int = 0  # snippets dropped as below min_relevance
    stages: list[StageReport] = field(default_factory=list)  # one per query stage that ran

    @classmethod
    def from_proto(cls, m: pb.RetrieveResponse) -> RetrieveResult:
        return cls(
            snippets=[Snippet.from_proto(s) for s in m.snippets],
            degraded=list(m.degraded),
            total_ms=m.timings.total_ms,
            filter_fields=[
                FilterFieldReport(r.field, r.documents_missing, r.documents_checked) for r in m.filter_fields
            ],
            raw=m,
            partial=m.partial,
            pending_vectors=m.pending_vectors,
            below_min_relevance=m.below_min_relevance,
            stages=[StageReport.from_proto(r) for r in m.stages],
        )

    def to_dict(self) -> dict[str, Any]:
        """The response in the proto JSON mapping with snake_case field names (as grpcurl prints it)."""
        return to_dict(self.raw)


#: DocumentResult.status values: what an ingest did with one document.
DOCUMENT_STATUSES = ("stored", "replaced", "unchanged", "failed")


@dataclass(frozen=True)
class DocumentResult:
    """Outcome of one ingested document: ``status`` is ``stored``, ``replaced``, ``unchanged`` or
    ``failed`` (then ``error`` says why and nothing of it was written); ``index`` is its position in the
    request or stream."""

    doc_id: str
    chunks_written: int
    pages_indexed: int
    replaced: bool
    chunks_pending_vectors: int = 0
    status: str = ""
    error: str = ""
    index: int = 0

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def _status(value: int) -> str:
    """``DOCUMENT_STATUS_STORED`` -> ``"stored"`` (``""`` when the server did not say)."""
    name = pb.DocumentStatus.Name(value) if value else ""  # type: ignore[arg-type]
    return name.removeprefix("DOCUMENT_STATUS_").lower()


@dataclass(frozen=True)
class IngestResult:
    """Outcome of an ingest call, one result per document in order."""

    results: list[DocumentResult]
    total_ms: float
    raw: Any = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> IngestResult:
        return cls(
            results=[
                DocumentResult(
                    r.doc_id,
                    r.chunks_written,
                    r.pages_indexed,
                    r.replaced,
                    r.chunks_pending_vectors,
                    status=_status(r.status),
                    error=r.error,
                    index=r.index,
                )
                for r in m.results
            ],
            total_ms=m.timings.total_ms,
            raw=m,
        )

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self.raw)


@dataclass(frozen=True)
class Library:
    """A library the caller may read."""

    library_id: str
    chunk_count: int
    pending_vectors: int = 0
    embedding_model: str = ""
    embedding_dim: int = 0
    # Chunker and contextual setting the library uses (stored with it, else the server's).
    chunker: str = ""
    contextual: str = ""

    @classmethod
    def from_proto(cls, m: pb.Library) -> Library:
        return cls(
            m.library_id,
            m.chunk_count,
            m.pending_vectors,
            m.embedding_model,
            m.embedding_dim,
            m.chunker,
            m.contextual,
        )


@dataclass(frozen=True)
class ServerInfo:
    """The server's limits and configuration."""

    version: str
    max_message_bytes: int
    max_top_k: int
    max_documents_per_request: int
    default_mode: str
    remote_worker: bool
    max_query_chars: int
    visual_model: str
    # What a new library uses unless its first ingest names its own.
    default_chunker: str = ""
    default_contextual: str = ""

    @classmethod
    def from_proto(cls, m: pb.RetrievalServiceInfoResponse) -> ServerInfo:
        return cls(
            m.version,
            m.max_message_bytes,
            m.max_top_k,
            m.max_documents_per_request,
            m.default_mode,
            m.remote_worker,
            m.max_query_chars,
            m.visual_model,
            m.default_chunker,
            m.default_contextual,
        )


def to_dict(message: Any) -> dict[str, Any]:
    """A wire message in the proto JSON mapping with the proto's snake_case field names."""
    return MessageToDict(message, preserving_proto_field_name=True)


@dataclass(frozen=True)
class FactRowError:
    """One row of a facts file that did not map onto a fact (``locator``: "facts.csv!A3", "Sheet1!A12")."""

    locator: str
    message: str


@dataclass(frozen=True)
class FactsIngestResult:
    """What one facts file gave: all rows or none (any ``errors`` means nothing was written)."""

    source_doc_id: str
    rows_read: int
    facts_written: int
    errors: list[FactRowError]
    raw: Any = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> FactsIngestResult:
        return cls(
            source_doc_id=m.source_doc_id,
            rows_read=m.rows_read,
            facts_written=m.facts_written,
            errors=[FactRowError(e.locator, e.message) for e in m.errors],
            raw=m,
        )


@dataclass(frozen=True)
class MetricResult:
    """A figure lookup in exactly one ``state``: "found" (``value``, ``unit``, ``source_doc``, ``locator``
    and ``answer``, all from the stored fact), "not_found" (``message``: a fixed refusal, never a number)
    or "unrecognized_param" (``param`` and the ``raw_value`` outside the vocabularies)."""

    state: str
    value: float | None = None
    unit: str = ""
    source_doc: str = ""
    locator: str = ""
    answer: str = ""
    message: str = ""
    param: str = ""
    raw_value: str = ""
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> MetricResult:
        state = m.WhichOneof("result") or "not_found"
        if state == "found":
            fact = m.found.fact
            return cls(
                state,
                value=fact.value,
                unit=fact.unit,
                source_doc=fact.source.doc,
                locator=fact.source.locator,
                answer=m.found.answer,
                raw=m,
            )
        if state == "unrecognized_param":
            return cls(state, param=m.unrecognized_param.param, raw_value=m.unrecognized_param.raw, raw=m)
        return cls(state, message=m.not_found.message, raw=m)
