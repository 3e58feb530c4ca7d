"""One typed settings object, built once from ``RAGSPINE_*`` environment variables (and CLI flags on top).

Field ``x`` is read from ``RAGSPINE_X``. The fields are declared once, in nine groups
(``RetrievalSettings``, ``ModelSettings``, ...: see ``GROUPS``); :class:`Settings` inherits every group, so
``settings.retrieval_mode``, ``Settings(retrieval_mode="bm25", data_dir=...)`` and
``dataclasses.replace(settings, ...)`` take the flat names, and ``settings.retrieval`` (``.models``,
``.limits``, ...) is that group alone, as its own typed, frozen object. A component that needs only one
group can ask for it (``limits: LimitsSettings``) and still be handed a whole ``Settings``.

``Settings.from_env`` is the one reader of the environment. It refuses, with one ``ValueError``, a value
that does not parse and a ``RAGSPINE_*`` name that is no setting (naming the closest one): a typo never
starts a server in the wrong mode. Names the project uses that are not settings are listed in
``NOT_SETTINGS``; deployment tooling that sets names of its own lets them through with
``RAGSPINE_SETTINGS_ALLOW`` (comma-separated names, or prefixes ending in ``*``).

Library code never reads the environment: factories take ``settings=`` and, without it, use the defaults
below. The exceptions are the published defaults the spec documents as environment defaults; they are
listed in ``SPEC_ENV_DEFAULTS`` and read through :func:`spec_env_default` only (tests/layout holds to it).

Selectors that switch an optional component off are read by :func:`choice` alone: blank means the
selector's default, and ``none`` / ``off`` (any case, any surrounding space) mean off (``"none"``).
``Settings.model_specs`` says, from the same fields, which models a deployment runs: the front and the
model worker both read it, so neither needs the other's code to agree on it.

``docs/configuration.md`` is generated from these declarations (``python -m ragspine.settings_doc --write``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Generic, TypeVar, cast, overload

from ragspine.retrieval.constants import DEFAULT_CHANGE_POLL_S

PREFIX = "RAGSPINE_"

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


def selected(spec: object, settings: object, name: str) -> str:
    """A factory's selector in canonical form (:func:`choice`, ``-`` read as ``_``): ``spec``, or when it is
    None the field ``name`` of ``settings`` (of the defaults when ``settings`` is no :class:`Settings`)."""
    if spec is None:
        spec = getattr(settings if isinstance(settings, Settings) else Settings(), name)
    return choice(spec).replace("-", "_")


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


_T = TypeVar("_T", str, int, float)
_G = TypeVar("_G")


def setting(default: _T, doc: str, *, secret: bool = False) -> _T:
    """Declare a settings field: its default and the one-line description ``docs/configuration.md`` shows
    (``secret``: a credential; the reference never shows a value for it)."""
    return cast(_T, field(default=default, metadata={"doc": doc, "secret": secret}))


# ------------------------------------------------------------------------------------------------ groups


@dataclass(frozen=True, kw_only=True)
class RetrievalSettings:
    """How a query is answered: the retrieval preset, chunking and index text, the optional query-side
    stages and the relevance floors."""

    retrieval_mode: str = setting(
        "auto",
        "Retrieval preset: auto, hybrid, vector (dense on); economy, bm25, lexical (no embeddings); "
        "sparse (SPLADE first stage); hybrid_sparse, full (BM25 + SPLADE + dense).",
    )
    chunker: str = setting(
        "default",
        "Chunker: default, semantic, layout, parent_child (small_to_big), sentence_window, laws, qa, book, "
        "or a name registered under the ragspine.chunkers entry points.",
    )
    contextual: str = setting(
        "none",
        "Contextual index text: none; header (title · entity · period · heading before each chunk's index "
        "text); document (the header, and each chunk also scored with its whole document).",
    )
    doc_weight: float = setting(
        0.5,
        "Share of a chunk's lexical score that comes from its document under contextual=document, in [0, 1).",
    )
    raptor: str = setting(
        "", "RAPTOR summaries beside the leaves: empty or none = off; on, all, leaves, summaries."
    )
    raptor_summarizer: str = setting("", "RAPTOR summarizer: extractive (empty), llm, none.")
    postprocessor: str = setting(
        "", "Comma chain of snippet postprocessors: mmr, lost_in_middle, compression; empty = none."
    )
    query_transform: str = setting(
        "", "LLM query transform: none, hyde, rag_fusion, step_back (needs an LLM provider); empty = none."
    )
    query_decompose: str = setting("", "Question decomposition: none, heuristic, llm; empty = none.")
    adaptive: str = setting(
        "", "Adaptive decomposition (multi-part questions only): none, heuristic, llm; empty = none."
    )
    corrective: str = setting(
        "", "Corrective loop: none, on (grade, then drop filters, rewrite or refuse); empty = none."
    )
    listwise_judge: str = setting(
        "", "LLM listwise judge over the final snippets: none, listwise (needs an LLM); empty = none."
    )
    filter_extractor: str = setting(
        "none", "Metadata filters read from the query: none, controlled_vocab (vocab), llm (needs an LLM)."
    )
    library_router: str = setting(
        "none", "Which libraries a Retrieve that names none searches: none (all), keyword, llm."
    )
    company_config: str = setting(
        "",
        "Domain profile (TOML: entities, metrics, channels, periods, sensitivity policy); empty = the "
        "built-in sample profile (ACME Group).",
    )
    glossary_path: str = setting(
        "",
        "A legacy glossary JSON for the query rewriter instead of the domain profile; empty = the profile.",
    )
    min_relevance: float = setting(
        0.0, "Retrieve drops snippets below this relevance (0-1) unless the request sets its own."
    )
    min_answer_relevance: float = setting(
        0.15,
        "Retrieve answers nothing when its best snippet's relevance is below this, unless the request sets "
        "min_relevance; 0 = off.",
    )


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """The models: dense, sparse, rerank and visual, where they run, and the OpenAI embedding API."""

    embedding: str = setting(
        "auto",
        "Dense embedding backend: auto (the packaged MiniLM when the models extra imports, else none), "
        "onnx, minilm, minilm-int8, minilm-packaged, st, e5, deterministic, openai, none.",
    )
    embedding_backend: str = setting("", "The spec's alias of embedding; wins when set.")
    embedding_model: str = setting("", "Model id or path for the embedding backends that take one.")
    sparse_model: str = setting(
        "", "SPLADE id or path for the sparse modes; empty = the packaged SPLADE-tiny."
    )
    reranker: str = setting("none", "Model reranker: none, cross_encoder (ce), colbert, splade, auto.")
    reranker_model: str = setting("", "Reranker model id or path; empty = the reranker's default model.")
    colbert_model: str = setting(
        "", "Model of the published make_reranker('colbert'); empty = colbert-ir/colbertv2.0."
    )
    splade_model: str = setting(
        "", "Model of the published make_reranker('splade'); empty = prithivida/Splade_PP_en_v1."
    )
    cross_encoder_model: str = setting(
        "", "Model of the published make_reranker('cross_encoder'); empty = Xenova/ms-marco-MiniLM-L-6-v2."
    )
    device: str = setting("auto", "Where models run: auto, cuda, cpu.")
    visual_embedder: str = setting(
        "none", "Visual page retrieval: none, colpali, colqwen2 (optionally family:model)."
    )
    visual_model: str = setting(
        "", "ColPali / ColQwen2 id or local path; empty = the family's published -hf model."
    )
    colpali_model: str = setting(
        "", "Model of the published make_visual_embedder('colpali'); empty = Qdrant/colpali-v1.3-fp16."
    )
    openai_base_url: str = setting("", "Base URL of the OpenAI-compatible embeddings API (embedding=openai).")
    openai_api_key: str = setting("", "API key of the OpenAI-compatible embeddings API.", secret=True)
    openai_embedding_model: str = setting(
        "text-embedding-3-small", "Model the OpenAI-compatible embeddings API is asked for."
    )
    http_timeout_s: float = setting(30.0, "Seconds one HTTP call to an embeddings or LLM API may take.")

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


@dataclass(frozen=True, kw_only=True)
class LLMSettings:
    """The chat LLM behind the optional LLM stages (query transforms, decomposition, judges, extraction)."""

    llm_provider: str = setting(
        "",
        "LLM provider: none, openai (any OpenAI-compatible server), deterministic; empty = openai when "
        "llm_base_url is set, else none.",
    )
    llm_base_url: str = setting("", "Base URL of the OpenAI-compatible chat server (vLLM, Ollama, TGI, ...).")
    llm_api_key: str = setting("", "API key of the chat server.", secret=True)
    llm_model: str = setting("", "Model the chat server is asked for.")
    llm_retries: int = setting(0, "Extra attempts after a transport failure, a timeout, a 429 or a 5xx.")
    llm_deadline_s: float = setting(
        5.0, "Cap in seconds on one stage's LLM calls; a caller's deadline may cut it shorter."
    )


@dataclass(frozen=True, kw_only=True)
class StoreSettings:
    """Where libraries, chunks, vectors and the index live, and how often the front looks for changes."""

    data_dir: str = setting(
        "./ragspine-data", "Folder of the libraries (SQLite stores and the files beside them)."
    )
    store_dsn: str = setting(
        "", "postgresql://... selects the PostgreSQL store; empty = SQLite under data_dir.", secret=True
    )
    vector_store: str = setting("memory", "Vector store: memory (in-process), pgvector (postgres), none.")
    index_backend: str = setting(
        "memory",
        "Where the narrative index lives: memory (in each front) or qdrant (an external Qdrant: fronts "
        "stateless; the qdrant extra).",
    )
    qdrant_url: str = setting(
        ":memory:", "Qdrant: :memory: (in-process), a folder (local mode on disk) or http(s)://host:port."
    )
    qdrant_api_key: str = setting("", "Qdrant API key.", secret=True)
    qdrant_collection_prefix: str = setting(
        "ragspine_", "Prefix of the Qdrant collection names (one per library)."
    )
    qdrant_timeout_s: float = setting(5.0, "Seconds before a Qdrant call fails as unavailable.")
    store_change_poll_s: float = setting(
        DEFAULT_CHANGE_POLL_S,
        "How long a served index trusts its last look at the store's change log while this front wrote "
        "nothing (other replicas' writes show within it); 0 = look on every query.",
    )
    library_list_poll_s: float = setting(1.0, "Seconds the list of libraries on disk is reused by queries.")
    max_open_libraries: int = setting(
        0,
        "Libraries a front keeps open at once (least recently used ones beyond it are closed and reopened "
        "on demand); 0 = as the file-descriptor limit leaves room for (at most 256).",
    )


@dataclass(frozen=True, kw_only=True)
class StructuredSettings:
    """The structured channel and the graph utilities (all off unless named)."""

    fact_store: str = setting(
        "",
        "make_fact_store(): none, sqlite, sqlite:PATH, postgres (store_dsn), postgresql://...; empty = none.",
    )
    graph_store: str = setting("", "make_graph_store(): none, memory, networkx; empty = none.")
    relation_extractor: str = setting(
        "",
        "make_relation_extractor(): none, cooccurrence, llm (edges model-derived, unverified); empty = none.",
    )
    narrative_graph: str = setting(
        "", "make_narrative_graph(): none, llm (needs an LLM provider); empty = none."
    )


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """The front's model worker: where it is, and how the front copes when it is slow, hung or gone."""

    worker_address: str = setting(
        "", "host:port of the model worker; empty = models in-process (laptop mode)."
    )
    worker_token: str = setting("", "Service token the front presents to the worker.", secret=True)
    worker_tls_ca_file: str = setting(
        "",
        "CA bundle (PEM) the front verifies the worker's TLS certificate with; empty = plaintext to it.",
    )
    worker_timeout_s: float = setting(
        5.0, "Cap in seconds per front-to-worker call; the caller's deadline may cut it shorter."
    )
    worker_fallback_reserve_s: float = setting(
        0.05, "Least time in seconds kept from a caller's deadline for the lexical answer."
    )
    worker_reserve_fraction: float = setting(
        0.5, "Share of the time left that is kept from a worker call (when more than the reserve)."
    )
    worker_breaker_failures: int = setting(
        3, "Consecutive failed worker calls that open the circuit breaker."
    )
    worker_breaker_open_s: float = setting(0.5, "Seconds the breaker stays open before a half-open probe.")
    worker_max_in_flight: int = setting(
        64, "Concurrent front-to-worker calls; more are shed (answers degrade)."
    )
    model_call_slots: int = setting(
        2,
        "Laptop mode: threads for in-process model calls of queries, bounded by the caller's deadline; "
        "0 = unbounded, on the serving thread.",
    )
    vector_drain_concurrency: int = setting(
        1, "Embedding batches the front's background vector drainer runs at once; 0 = none (embed lazily)."
    )
    vector_batch_size: int = setting(32, "Passages per background embedding batch.")
    vector_batch_tokens: int = setting(4096, "Approximate tokens per background embedding batch.")


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """The served process: addresses and ports, TLS and auth, shutdown and memory housekeeping."""

    host: str = setting("127.0.0.1", "Address the gRPC (and HTTP) servers bind.")
    front_port: int = setting(50051, "gRPC port of the front.")
    worker_port: int = setting(50052, "gRPC port of the model worker.")
    http_port: int = setting(
        0, "HTTP face of the front (Dify /retrieval, REST /v1/..., /openapi.json) on host; 0 = off."
    )
    http_allowed_origins: str = setting(
        "",
        "Without tokens, HTTP writes come only from the server's own origin and these (comma-separated, "
        "e.g. http://localhost:3000).",
    )
    metrics_port: int = setting(0, "Prometheus /metrics port; 0 = no metrics endpoint.")
    metrics_host: str = setting("", "Address the metrics endpoint binds; empty = the same as host.")
    auth_tokens_file: str = setting(
        "", "JSON {token: {caller, libraries, scopes?}} of the callers; empty = no auth (open mode)."
    )
    tls_cert_file: str = setting("", "TLS certificate (PEM) the servers present; empty = plaintext.")
    tls_key_file: str = setting("", "Private key (PEM) of tls_cert_file.")
    shutdown_grace_s: float = setting(10.0, "Seconds in-flight calls get to finish after SIGTERM.")
    malloc_arena_max: int = setting(
        2, "glibc malloc arenas of a server process; 0 = the C library's default (8 per core)."
    )
    heap_trim_bytes: int = setting(
        1024 * 1024, "After a request message at least this large, free heap is handed back; 0 = never."
    )

    @property
    def metrics_bind_host(self) -> str:
        """Where ``/metrics`` listens: ``metrics_host``, else wherever gRPC binds (``host``)."""
        return self.metrics_host or self.host


@dataclass(frozen=True, kw_only=True)
class LimitsSettings:
    """What one front takes on at once, and the ingestion limits (each refusal names its variable)."""

    max_running_calls: int = setting(
        16, "Calls the front runs at once (health checks always find a thread); more wait in a queue."
    )
    max_queued_calls: int = setting(
        64, "Calls that wait for a run slot; more are refused at once with RESOURCE_EXHAUSTED."
    )
    queue_wait_s: float = setting(1.0, "Longest wait in seconds for a run slot, then RESOURCE_EXHAUSTED.")
    max_heavy_retrieves: int = setting(
        1, "Heavy Retrieve calls (top_k > 100 or a query over 1,000 characters) at once."
    )
    large_calls_per_caller: int = setting(
        2, "Requests over 1 MiB one caller without a token may run at once, per client address."
    )
    http_max_body_bytes: int = setting(
        32 * 1024 * 1024, "Largest HTTP request body, refused with 413 while it is read."
    )
    max_libraries: int = setting(
        10_000, "Libraries one front may hold (creating one more is refused); 0 = no limit."
    )
    max_concurrent_ingests: int = setting(4, "Ingest / IngestStream calls running at once; more are refused.")
    max_stream_documents: int = setting(100_000, "Documents per IngestStream call.")
    max_stream_bytes: int = setting(2 * 1024**3, "Document bytes per IngestStream call.")
    max_document_text_chars: int = setting(4_000_000, "Extracted text characters per document.")
    max_document_pages: int = setting(2_000, "Pages per PDF.")
    max_chunks_per_document: int = setting(
        20_000, "Chunks one document may split into (checked before the write)."
    )
    max_page_pixels: int = setting(12_000_000, "Pixels per rendered page (the DPI is lowered to fit).")
    max_document_pixels: int = setting(150_000_000, "Rendered pixels per document (all pages).")
    max_decompression_ratio: float = setting(
        40.0, "Extracted text bytes per PDF byte (checked above 1 MiB of text)."
    )
    ocr: str = setting(
        "auto",
        "OCR of scanned PDF pages and image files on the CPU (PP-OCRv4 zh+en, the ocr extra): auto (on when "
        "installed), on, off.",
    )
    parse_memory_bytes: int = setting(
        2 * 1024**3, "Address-space cap of the PDF parse/render process; 0 = parse in-process."
    )


@dataclass(frozen=True, kw_only=True)
class TracingSettings:
    """OpenTelemetry tracing."""

    otlp_endpoint: str = setting(
        "", "OpenTelemetry collector (http://host:4317 or https://...); empty = no tracing."
    )
    otlp_sample_ratio: float = setting(
        1.0, "Share of requests traced (the worker follows the front's decision)."
    )


# ---------------------------------------------------------------------------------------------- Settings


class _GroupView(Generic[_G]):
    """``settings.<group>``: the fields of one group, read off the flat settings, as that group's object."""

    def __init__(self, group: type[_G]) -> None:
        self.group = group

    @overload
    def __get__(self, obj: None, owner: type) -> _GroupView[_G]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> _G: ...

    def __get__(self, obj: object, owner: type) -> _GroupView[_G] | _G:
        if obj is None:
            return self
        return self.group(**{f.name: getattr(obj, f.name) for f in fields(self.group)})  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Settings(
    TracingSettings,
    LimitsSettings,
    ServiceSettings,
    WorkerSettings,
    StructuredSettings,
    StoreSettings,
    LLMSettings,
    ModelSettings,
    RetrievalSettings,
):
    """Every ``RAGSPINE_*`` knob, flat (field ``x`` is read from ``RAGSPINE_X``), and each group as a view
    (``settings.retrieval``, ``.models``, ``.llm``, ``.stores``, ``.structured``, ``.worker``,
    ``.service``, ``.limits``, ``.tracing``)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``environ`` (default ``os.environ``); ``overrides`` (e.g. CLI flags; ``None``
        = not given) win.

        Raises ``ValueError`` naming the variable when a value does not parse, and naming every
        ``RAGSPINE_*`` variable that is no setting (with the closest setting's name) unless
        ``NOT_SETTINGS`` or ``RAGSPINE_SETTINGS_ALLOW`` lets it through.
        """
        env = os.environ if environ is None else environ
        check_variable_names(env)
        values: dict[str, Any] = {}
        for f in _FIELDS:
            raw = env.get(variable(f.name))
            if raw is not None:
                values[f.name] = _parse(f, raw)
        settings = cls(**values)
        clean = {k: v for k, v in overrides.items() if v is not None}
        return replace(settings, **clean) if clean else settings

    retrieval = _GroupView(RetrievalSettings)
    models = _GroupView(ModelSettings)
    llm = _GroupView(LLMSettings)
    stores = _GroupView(StoreSettings)
    structured = _GroupView(StructuredSettings)
    worker = _GroupView(WorkerSettings)
    service = _GroupView(ServiceSettings)
    limits = _GroupView(LimitsSettings)
    tracing = _GroupView(TracingSettings)

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


# The groups, in the order docs/configuration.md lists them (the order of the views on Settings):
# (attribute of Settings, group class).
GROUPS: tuple[tuple[str, type], ...] = tuple(
    (name, view.group) for name, view in vars(Settings).items() if isinstance(view, _GroupView)
)

_FIELDS: tuple[Field[Any], ...] = fields(Settings)
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float}


def variable(name: str) -> str:
    """The environment variable of field ``name`` (``retrieval_mode`` → ``RAGSPINE_RETRIEVAL_MODE``)."""
    return PREFIX + name.upper()


def field_type(f: Field[Any]) -> type:
    """``str``, ``int`` or ``float``: the type a field's variable is parsed as."""
    return _TYPES[f.type if isinstance(f.type, str) else f.type.__name__]


def _parse(f: Field[Any], raw: str) -> Any:
    kind = field_type(f)
    if kind is str:
        return raw.strip()
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{variable(f.name)}={raw!r} is not {what}") from None


# Every RAGSPINE_* variable that is a setting.
VARIABLES: frozenset[str] = frozenset(variable(f.name) for f in _FIELDS)

ALLOW_VARIABLE = "RAGSPINE_SETTINGS_ALLOW"

# RAGSPINE_* names the project itself uses that are not settings: from_env lets them pass.
NOT_SETTINGS: Mapping[str, str] = {
    ALLOW_VARIABLE: "Further RAGSPINE_* names from_env lets through (comma-separated; NAME or PREFIX*), "
    "for variables deployment tooling sets that are no settings.",
    "RAGSPINE_TOKEN": "The client token of ragspine query / ingest / facts --server (the --token flag wins).",
    "RAGSPINE_SHARED_DATA": "The evaluation data folder of the tests, the benchmarks and ragspine demo.",
}


def _allowed_patterns(raw: str) -> tuple[str, ...]:
    patterns = tuple(p for p in raw.replace(",", " ").split() if p)
    for pattern in patterns:
        if not pattern.startswith(PREFIX):
            raise ValueError(
                f"{ALLOW_VARIABLE}: {pattern!r} is not a {PREFIX}* name (or a prefix ending in *)"
            )
    return patterns


def _is_allowed(name: str, patterns: tuple[str, ...]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``RAGSPINE_*`` names in ``environ`` that are neither settings, nor in ``NOT_SETTINGS``, nor let
    through by ``RAGSPINE_SETTINGS_ALLOW``, sorted. Raises ``ValueError`` for a malformed allow-list."""
    patterns = _allowed_patterns(environ.get(ALLOW_VARIABLE, ""))
    return sorted(
        name
        for name in environ
        if name.startswith(PREFIX)
        and name not in VARIABLES
        and name not in NOT_SETTINGS
        and not _is_allowed(name, patterns)
    )


def check_variable_names(environ: Mapping[str, str]) -> None:
    """Raise one ``ValueError`` naming every unknown ``RAGSPINE_*`` variable of ``environ`` (see
    :func:`unknown_variables`) and, for each, the closest known name."""
    unknown = unknown_variables(environ)
    if not unknown:
        return
    known = sorted(VARIABLES | set(NOT_SETTINGS))
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        described.append(f"{name} (did you mean {close[0]}?)" if close else name)
    noun = "variable" if len(unknown) == 1 else "variables"
    raise ValueError(
        f"unknown {PREFIX}* {noun}: {'; '.join(described)}. Every setting is listed in "
        f"docs/configuration.md; a variable that deployment tooling sets on purpose can be let through with "
        f"{ALLOW_VARIABLE}=NAME[,NAME or PREFIX*]"
    )


# ------------------------------------------------------------------------------ spec-documented defaults


@dataclass(frozen=True)
class SpecEnvDefault:
    """A published default that reads the environment because the spec documents it so."""

    reads: tuple[str, ...]  # the settings fields it reads (their variables, and no others)
    spec: str  # where the spec says so


# The only library code that reads the environment, each from a published default the spec documents as an
# environment default (keyed by "module.function" of the one caller; tests/layout/test_settings_plumbing.py
# finds every call of spec_env_default and checks it against this table). Every other factory, given no
# settings, uses the defaults above.
SPEC_ENV_DEFAULTS: Mapping[str, SpecEnvDefault] = {
    "ragspine.retrieval.vector.embedding_backends.make_embedding_backend": SpecEnvDefault(
        reads=(
            "embedding_backend",
            "openai_base_url",
            "openai_api_key",
            "openai_embedding_model",
            "http_timeout_s",
        ),
        spec="000_*.txt, 'vector': make_embedding_backend's spec 'defaults to env "
        "RAGSPINE_EMBEDDING_BACKEND' (unset: None, pure BM25; RAGSPINE_EMBEDDING=auto is the service "
        "layer's default and is read through Settings, not here; the openai backend it selects takes its "
        "options from the same place)",
    ),
    "ragspine.retrieval.rerank.cross_encoder.make_reranker": SpecEnvDefault(
        reads=("reranker", "colbert_model", "splade_model", "cross_encoder_model"),
        spec="000_*.txt, 'make_reranker(\"cross_encoder\"),  # or RAGSPINE_RERANKER=cross_encoder'; "
        "API-stack.md, COLBERT_MODEL_ENV / SPLADE_MODEL_ENV / CROSS_ENCODER_MODEL_ENV (each family's model "
        "when model_name is not given)",
    ),
    "ragspine.retrieval.vision.colpali.make_visual_embedder": SpecEnvDefault(
        reads=("visual_embedder", "colpali_model"),
        spec="API-stack.md, VISUAL_EMBEDDER_ENV / COLPALI_MODEL_ENV of ragspine.retrieval.vision.colpali "
        "(the embedder when spec is None; its model when model_name is not given)",
    ),
    "ragspine.common.company_profile.load_company_profile": SpecEnvDefault(
        reads=("company_config",),
        spec="API-stack.md, 'Domain profile': 'The profile is a TOML file (path from "
        "RAGSPINE_COMPANY_CONFIG); without one, a built-in default profile applies' "
        "(load_company_profile(path=None), hence the ragspine.common.glossary constants and the "
        "components given no profile)",
    ),
}


def spec_env_default(caller: str, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the published default ``caller`` (a key of ``SPEC_ENV_DEFAULTS``) reads from
    ``environ`` (default ``os.environ``): only the variables listed for it, so that a library call never
    fails over an unrelated variable. Raises ``ValueError`` naming a variable whose value does not parse,
    ``KeyError`` for a caller that is not listed."""
    if caller not in SPEC_ENV_DEFAULTS:
        raise KeyError(f"{caller!r} is not a spec-documented environment default (see SPEC_ENV_DEFAULTS)")
    env = os.environ if environ is None else environ
    wanted = {variable(name) for name in SPEC_ENV_DEFAULTS[caller].reads}
    return Settings.from_env({name: value for name, value in env.items() if name in wanted})
