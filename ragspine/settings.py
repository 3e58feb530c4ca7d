"""One typed settings object, built from ``RAGSPINE_*`` environment variables (and CLI flags on top).

Components never read the environment themselves: they receive values from here as arguments. The
spec's factories (``make_embedding_backend(spec=None)`` and friends) resolve a missing ``spec`` through
``Settings.from_env()`` so that behaviour stays in one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

_PREFIX = "RAGSPINE_"


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
    postprocessor: str = ""
    filter_extractor: str = "none"
    library_router: str = "none"
    vector_store: str = "memory"
    glossary_path: str = ""
    device: str = "auto"
    visual_embedder: str = "none"
    visual_model: str = ""  # ColPali / ColQwen2 id or local path; empty = the family's published -hf model
    llm_provider: str = ""  # none | openai | deterministic; empty = openai when llm_base_url is set
    llm_base_url: str = ""
    llm_api_key: str = ""
    llm_model: str = ""
    openai_base_url: str = ""
    openai_api_key: str = ""
    openai_embedding_model: str = "text-embedding-3-small"
    http_timeout_s: float = 30.0
    # Service wiring (front tier, model worker, deployment).
    host: str = "127.0.0.1"
    front_port: int = 50051
    worker_port: int = 50052
    metrics_port: int = 0  # 0 = no Prometheus endpoint
    worker_address: str = ""  # host:port of the model worker; empty = in-process models (laptop mode)
    worker_token: str = ""  # service token the front presents to the worker
    auth_tokens_file: str = ""  # JSON {token: {"caller": name, "libraries": [...] or ["*"]}}; empty = no auth
    tls_cert_file: str = ""
    tls_key_file: str = ""
    store_dsn: str = ""  # postgresql://... selects the PostgreSQL store; empty = SQLite under data_dir
    worker_timeout_s: float = 5.0  # cap per front→worker call; the caller's deadline may cut it shorter
    shutdown_grace_s: float = 10.0  # after SIGTERM, seconds in-flight calls get to finish
    # The front against a slow, hung or dead worker (see ragspine_services.common.breaker).
    worker_fallback_reserve_s: float = 0.05  # least time kept from a caller's deadline for the lexical answer
    worker_breaker_failures: int = 3  # consecutive failed worker calls that open the circuit breaker
    worker_breaker_open_s: float = 0.5  # seconds the breaker stays open before a half-open probe
    worker_max_in_flight: int = 64  # concurrent front->worker calls; more are shed (answers degrade)
    # Ingestion limits (see ragspine.ingest.limits); each refusal names its variable.
    max_document_text_chars: int = 4_000_000  # extracted text per document
    max_document_pages: int = 2_000  # pages per PDF
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
    def embedding_spec(self) -> str:
        """The embedding selector after applying the spec's ``RAGSPINE_EMBEDDING_BACKEND`` alias."""
        return self.embedding_backend or self.embedding
