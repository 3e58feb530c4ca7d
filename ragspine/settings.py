"""One typed settings object, built from ``RAGSPINE_*`` environment variables (and CLI flags on top).

Components never read the environment themselves: they receive values from here as arguments. Every
factory (``make_embedding_backend`` and friends) takes ``settings=``; only when it is called with neither a
``spec`` nor ``settings`` does it resolve them through ``Settings.from_env()``, the spec's documented
behaviour, so that stays in one place.

Selectors that switch an optional component off are read by :func:`choice` alone: blank means the
selector's default, and ``none`` / ``off`` (any case, any surrounding space) mean off (``"none"``).
``Settings.model_specs`` says, from the same fields, which models a deployment runs: the front and the
model worker both read it, so neither needs the other's code to agree on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ragspine.retrieval.constants import DEFAULT_CHANGE_POLL_S

_PREFIX = "RAGSPINE_"

OFF = "none"
# Every spelling of "off" a selector accepts; choice() maps them all to OFF.
OFF_SPELLINGS = frozenset({"none", "off"})


def choice(value: object, default: str = OFF) -> str:
    """A selector's value in canonical form: trimmed and lower-case, blank → ``default``, and every
    spelling of off (``none``, ``off``) → ``"none"``. The one place where "none" is decided."""
    text = "" if value is None else str(value).strip().lower()
    if not text:
        text = default
    return OFF if text in OFF_SPELLINGS else text


def is_off(value: object, default: str = OFF) -> bool:
    """True when ``value`` (blank read as ``default``) switches its component off."""
    return choice(value, default) == OFF


# What each RAGSPINE_RETRIEVAL_MODE preset uses: alias -> (canonical name, dense embeddings, learned sparse).
# ``ragspine.retrieval.mode`` turns these into ``RetrievalMode``; ``model_specs`` reads them here.
RETRIEVAL_MODES: dict[str, tuple[str, bool, bool]] = {
    "auto": ("auto", True, False),
    "hybrid": ("hybrid", True, False),
    "vector": ("vector", True, False),
    "economy": ("economy", False, False),
    "bm25": ("economy", False, False),
    "lexical": ("economy", False, False),
    "sparse": ("sparse", False, True),
    "hybrid_sparse": ("hybrid_sparse", True, True),
    "full": ("hybrid_sparse", True, True),
}


def retrieval_mode_key(spec: object) -> str:
    """The ``RETRIEVAL_MODES`` key of a mode name (case-insensitive, ``-`` read as ``_``); raises
    ``ValueError`` listing the choices for an unknown name."""
    key = str(spec).strip().lower().replace("-", "_")
    if key not in RETRIEVAL_MODES:
        raise ValueError(f"unknown retrieval mode {spec!r}; choices: {', '.join(RETRIEVAL_MODES)}")
    return key


@dataclass(frozen=True)
class ModelSpecs:
    """The models a deployment runs, each ``""`` when off: what the model worker loads and what the front
    asks it for (or loads itself in laptop mode)."""

    embedding: str  # an embedding selector (``auto``, ``onnx``, ``e5``, ...)
    sparse: str  # ``splade`` (the packaged SPLADE-tiny) or a SPLADE id / path
    reranker: str  # a reranker selector (``cross_encoder``, ``colbert``, ``splade``, ...)
    visual: str  # ``family[:model]`` (``colqwen2:vidore/colqwen2-v1.0-hf``)


@dataclass(frozen=True)
class Settings:
    """Every ``RAGSPINE_*`` knob. Field ``x`` is read from ``RAGSPINE_X``."""

    data_dir: str = "./ragspine-data"
    retrieval_mode: str = "auto"
    embedding: str = "auto"
    embedding_backend: str = ""  # spec alias of ``embedding``; wins when set
    embedding_model: str = ""
    sparse_model: str = ""  # SPLADE id or path for sparse modes; empty = the packaged SPLADE-tiny
    reranker: str = "none"
    reranker_model: str = ""
    chunker: str = "default"
    raptor: str = ""  # RAPTOR summaries beside the leaves: "" / none = off, on | all | leaves | summaries
    raptor_summarizer: str = ""  # extractive (default) | llm | none
    postprocessor: str = ""  # comma chain: mmr, lost_in_middle, compression; empty = none
    query_transform: str = ""  # none | hyde | rag_fusion | step_back (needs an LLM provider); empty = none
    query_decompose: str = ""  # none | heuristic | llm; empty = none
    adaptive: str = ""  # none | heuristic | llm: decompose multi-part questions only; empty = none
    corrective: str = ""  # none | on: grade -> act loop (drop filters -> rewrite -> refuse); empty = none
    listwise_judge: str = ""  # none | listwise: LLM listwise judge over the final snippets; empty = none
    filter_extractor: str = "none"
    library_router: str = "none"
    vector_store: str = "memory"
    # Where the narrative index lives: memory (in each front) | qdrant (an external Qdrant, fronts stateless).
    index_backend: str = "memory"
    qdrant_url: str = ":memory:"  # :memory: | a folder (local mode) | http(s)://host:port
    qdrant_api_key: str = ""
    qdrant_collection_prefix: str = "ragspine_"
    qdrant_timeout_s: float = 5.0
    glossary_path: str = ""  # a legacy glossary JSON for the query rewriter instead of the domain profile
    company_config: str = ""  # the domain profile (TOML); empty = the built-in default vocabulary
    contextual: str = "none"  # contextual headers on the index text: none | header | document
    doc_weight: float = 0.5  # share of a chunk's lexical score from its whole document (contextual=document)
    device: str = "auto"
    visual_embedder: str = "none"
    visual_model: str = ""  # ColPali / ColQwen2 id or local path; empty = the family's published -hf model
    llm_provider: str = ""  # none | openai | deterministic; empty = openai when llm_base_url is set
    llm_base_url: str = ""
    llm_api_key: str = ""
    llm_model: str = ""
    llm_retries: int = 0  # extra attempts after a transport failure, a timeout, a 429 or a 5xx
    llm_deadline_s: float = 5.0  # cap on one stage's LLM calls; a caller's deadline may cut it
    openai_base_url: str = ""
    openai_api_key: str = ""
    openai_embedding_model: str = "text-embedding-3-small"
    http_timeout_s: float = 30.0
    # Service wiring (front tier, model worker, deployment).
    host: str = "127.0.0.1"
    front_port: int = 50051
    worker_port: int = 50052
    metrics_port: int = 0  # 0 = no Prometheus endpoint
    http_port: int = 0  # HTTP face (Dify /retrieval, REST, /openapi.json) on the front's host; 0 = off
    # Largest HTTP request body, refused with 413 while it is read (default: the gRPC message cap).
    http_max_body_bytes: int = 32 * 1024 * 1024
    # Without tokens, HTTP writes come only from the server's own origin and these (comma-separated,
    # e.g. "http://localhost:3000"): a web page elsewhere cannot post to a laptop's open server.
    http_allowed_origins: str = ""
    # Requests over 1 MiB that one caller without a token (open mode) may run at once, per client address.
    large_calls_per_caller: int = 2
    # Calls the front runs at once (more wait up to queue_wait_s in a bounded queue, then are refused with
    # RESOURCE_EXHAUSTED; health checks always find a thread), and heavy Retrieve calls (top_k > 100 or a
    # query over 1,000 characters) at once.
    max_running_calls: int = 16
    max_queued_calls: int = 64
    queue_wait_s: float = 1.0
    max_heavy_retrieves: int = 1
    # glibc malloc arenas of a server process (freed large buffers pool in few arenas and are trimmed
    # back to the system); 0 = the C library's default (8 per core).
    malloc_arena_max: int = 2
    # After a request message at least this large, free heap memory is handed back (malloc_trim); 0 = never.
    heap_trim_bytes: int = 1024 * 1024
    min_relevance: float = 0.0  # Retrieve drops snippets below this relevance unless it sets its own
    # Retrieve answers nothing when its best snippet's relevance is below this, unless the request sets its
    # own min_relevance (the pipeline's DEFAULT_MIN_ANSWER_RELEVANCE; bench/relevance.py measures it).
    min_answer_relevance: float = 0.15
    metrics_host: str = ""  # address the metrics endpoint binds; empty = the same as ``host``
    otlp_endpoint: str = ""  # OpenTelemetry collector (http://host:4317 or https://...); empty = no tracing
    otlp_sample_ratio: float = 1.0  # share of requests traced (the worker follows the front's decision)
    worker_address: str = ""  # host:port of the model worker; empty = in-process models (laptop mode)
    worker_token: str = ""  # service token the front presents to the worker
    auth_tokens_file: str = ""  # JSON {token: {caller, libraries, scopes?}} (see README); empty = no auth
    tls_cert_file: str = ""
    tls_key_file: str = ""
    store_dsn: str = ""  # postgresql://... selects the PostgreSQL store; empty = SQLite under data_dir
    worker_timeout_s: float = 5.0  # cap per front→worker call; the caller's deadline may cut it shorter
    shutdown_grace_s: float = 10.0  # after SIGTERM, seconds in-flight calls get to finish
    # Structured channel and graph utilities (all off unless named).
    fact_store: str = ""  # none | sqlite | sqlite:PATH | postgres | postgresql://...; empty = none
    graph_store: str = ""  # none | memory | networkx; empty = none
    relation_extractor: str = ""  # none | cooccurrence | llm; empty = none
    # Background vector drainer of the front: embedding batches at once (0 = none: queries embed lazily),
    # passages and approximate tokens per batch (sized so a CPU worker finishes well within its timeout).
    vector_drain_concurrency: int = 1
    vector_batch_size: int = 32
    vector_batch_tokens: int = 4096
    # The front against a slow, hung or dead worker (see ragspine_services.common.breaker).
    worker_fallback_reserve_s: float = 0.05  # least time kept from a caller's deadline for the lexical answer
    worker_reserve_fraction: float = 0.5  # share of the time left kept from a worker call (if more)
    worker_breaker_failures: int = 3  # consecutive failed worker calls that open the circuit breaker
    worker_breaker_open_s: float = 0.5  # seconds the breaker stays open before a half-open probe
    worker_max_in_flight: int = 64  # concurrent front->worker calls; more are shed (answers degrade)
    # Laptop mode: in-process model calls made for queries run on this many threads, bounded by the
    # caller's deadline with the reserve above (an abandoned call holds its slot until it finishes);
    # 0 = unbounded, on the serving thread (saves a thread hand-off per call, gives up the deadline).
    model_call_slots: int = 2
    # How long a library's served index may trust its last look at the store's change log when this
    # front wrote nothing since (writes by other replicas show within it); 0 = look on every query.
    store_change_poll_s: float = DEFAULT_CHANGE_POLL_S
    library_list_poll_s: float = 1.0  # how long the list of libraries on disk is reused by queries
    # Libraries a front keeps open at once (least recently used ones beyond it have their files closed and
    # are opened again on demand); 0 = as many as the file-descriptor limit leaves room for (<= 256).
    max_open_libraries: int = 0
    max_libraries: int = 10_000  # libraries one front may hold; creating one more is refused (0 = no limit)
    # Ingestion limits (see ragspine.ingest.limits); each refusal names its variable.
    max_document_text_chars: int = 4_000_000  # extracted text per document
    max_document_pages: int = 2_000  # pages per PDF
    max_chunks_per_document: int = 20_000  # chunks one document may split into
    max_page_pixels: int = 12_000_000  # pixels per rendered page: the DPI is lowered to fit
    max_document_pixels: int = 150_000_000  # rendered pixels per document (all pages)
    max_decompression_ratio: float = 40.0  # extracted text bytes per PDF byte (above 1 MiB of text)
    max_concurrent_ingests: int = 4  # Ingest / IngestStream calls running at once; more are refused
    max_stream_documents: int = 100_000  # documents per IngestStream call
    max_stream_bytes: int = 2 * 1024**3  # document bytes per IngestStream call
    parse_memory_bytes: int = 2 * 1024**3  # address-space cap of the PDF parse/render process; 0 = in-process
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``environ`` (default ``os.environ``); ``overrides`` (e.g. CLI flags) win.

        Raises ``ValueError`` naming the variable when a value does not parse.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        known = {f.name: f for f in fields(cls) if f.name != "extra"}
        for name, f in known.items():
            raw = env.get(_PREFIX + name.upper())
            if raw is None:
                continue
            if f.type in ("float", float, "int", int):
                convert = int if f.type in ("int", int) else float
                try:
                    values[name] = convert(raw)
                except ValueError:
                    kind = "an integer" if convert is int else "a number"
                    raise ValueError(f"{_PREFIX}{name.upper()}={raw!r} is not {kind}") from None
            else:
                values[name] = raw.strip()
        extra = {
            k[len(_PREFIX) :].lower(): v
            for k, v in env.items()
            if k.startswith(_PREFIX) and k[len(_PREFIX) :].lower() not in known
        }
        values["extra"] = extra
        settings = cls(**values)
        clean = {k: v for k, v in overrides.items() if v is not None}
        return replace(settings, **clean) if clean else settings

    @property
    def metrics_bind_host(self) -> str:
        """Where ``/metrics`` listens: ``metrics_host``, else wherever gRPC binds (``host``)."""
        return self.metrics_host or self.host

    @property
    def embedding_spec(self) -> str:
        """The embedding selector after applying the spec's ``RAGSPINE_EMBEDDING_BACKEND`` alias."""
        return self.embedding_backend or self.embedding

    @property
    def visual_spec(self) -> str:
        """``visual_embedder`` and ``visual_model`` as one ``family[:model]`` spec; ``""`` = visual off."""
        family, _, inline = self.visual_embedder.strip().partition(":")
        if is_off(family):
            return ""
        model = inline.strip() or self.visual_model.strip()
        family = family.strip().lower()
        return f"{family}:{model}" if model else family

    @property
    def model_specs(self) -> ModelSpecs:
        """The models these settings run (see :class:`ModelSpecs`). Raises ``ValueError`` for an unknown
        retrieval mode."""
        _, _, uses_sparse = RETRIEVAL_MODES[retrieval_mode_key(self.retrieval_mode)]
        embedding = "" if is_off(self.embedding_spec) else self.embedding_spec.strip()
        return ModelSpecs(
            embedding=embedding,
            sparse=self.sparse_model or ("splade" if uses_sparse else ""),
            reranker="" if is_off(self.reranker) else self.reranker.strip(),
            visual=self.visual_spec,
        )
