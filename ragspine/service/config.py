"""The published ``ServiceConfig`` (its retrieval side) and what is built from it.

Code written against the published package configures retrieval through ``ServiceConfig`` (ADR 0016 names
``ServiceConfig.retrieval_mode``): ``ServiceConfig.from_env()`` reads the ``RAGSPINE_*`` variables,
``open_narrative_retriever(config, provider)`` opens the chunk database and yields the assembled retriever,
``make_retrieval_preset`` names the economy and high-quality presets. Every published field is accepted
so such code constructs the config unchanged; the fields of the published application that this service
does not have (Redis, Dify runs, n8n, the studio, uploads) are kept as given and read by nothing here.
``to_settings()`` turns the retrieval fields into this package's ``Settings``, the one settings object
everything else takes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import date
from enum import Enum
from pathlib import Path
from typing import Any

from ragspine.agent.llm_provider import DEFAULT_ANTHROPIC_MODEL, AnthropicProvider, MockProvider
from ragspine.retrieval.llm.providers import OpenAICompatibleProvider
from ragspine.retrieval.seams import LLMProvider, NarrativeRetriever
from ragspine.settings import Settings, is_off

__all__ = [
    "PathNotAllowedError",
    "RetrievalPreset",
    "RetrievalProfile",
    "ServiceConfig",
    "build_provider",
    "make_retrieval_preset",
    "open_fact_store",
    "open_narrative_retriever",
    "provider_config_dict",
    "validate_ingest_path",
]

RetrievalModeSpec = str
EmbeddingSpec = str
VectorStoreSpec = str
RerankerSpec = str
PostprocessorSpec = str

_PACKAGED_STUDIO_DIR = Path(__file__).resolve().parent / "studio"
PROVIDER_TYPES = ("mock", "anthropic", "openai")


class RetrievalProfile(str, Enum):  # noqa: UP042 - the published base classes
    """Dify's two knowledge-base modes: economy (BM25 only, no embedding cost) and high quality."""

    ECONOMY = "economy"
    HIGH_QUALITY = "high_quality"


@dataclass(frozen=True)
class RetrievalPreset:
    """The retrieval choices of one profile, each a selector this package's factories read."""

    retrieval_mode: RetrievalModeSpec
    embedding: EmbeddingSpec
    vector_store: VectorStoreSpec
    reranker: RerankerSpec
    postprocessor: PostprocessorSpec

    def with_overrides(
        self,
        *,
        retrieval_mode: RetrievalModeSpec | None = None,
        embedding: EmbeddingSpec | None = None,
        vector_store: VectorStoreSpec | None = None,
        reranker: RerankerSpec | None = None,
        postprocessor: PostprocessorSpec | None = None,
    ) -> RetrievalPreset:
        """This preset with the given choices replaced (None keeps a choice)."""
        given = {
            "retrieval_mode": retrieval_mode,
            "embedding": embedding,
            "vector_store": vector_store,
            "reranker": reranker,
            "postprocessor": postprocessor,
        }
        for name, value in given.items():
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty selector string, got {value!r}")
        return replace(self, **{k: v.strip() for k, v in given.items() if v is not None})


_PRESETS = {
    RetrievalProfile.ECONOMY: RetrievalPreset("economy", "none", "none", "none", "none"),
    RetrievalProfile.HIGH_QUALITY: RetrievalPreset("hybrid", "auto", "none", "auto", "none"),
}


def make_retrieval_preset(
    profile: RetrievalProfile | str = RetrievalProfile.ECONOMY,
    *,
    retrieval_mode: RetrievalModeSpec | None = None,
    embedding: EmbeddingSpec | None = None,
    vector_store: VectorStoreSpec | None = None,
    reranker: RerankerSpec | None = None,
    postprocessor: PostprocessorSpec | None = None,
) -> RetrievalPreset:
    """The preset of ``profile`` (``economy``: BM25 only; ``high_quality``: hybrid with the packaged
    embedding and the reranker when one loads), with any choice overridden. ``ValueError`` naming the
    profiles for an unknown one."""
    try:
        chosen = RetrievalProfile(str(getattr(profile, "value", profile)).strip().lower().replace("-", "_"))
    except ValueError:
        names = ", ".join(p.value for p in RetrievalProfile)
        raise ValueError(f"unknown retrieval profile {profile!r}; choose one of: {names}") from None
    return _PRESETS[chosen].with_overrides(
        retrieval_mode=retrieval_mode,
        embedding=embedding,
        vector_store=vector_store,
        reranker=reranker,
        postprocessor=postprocessor,
    )


@dataclass(frozen=True)
class ServiceConfig:
    """The published service configuration; see the module docstring for what is read here."""

    db_path: str
    chunk_db_path: str | None = None
    mapping_db_path: str | None = None
    queue_db_path: str | None = None
    manifest_db_path: str | None = None
    redis_url: str = "redis://localhost:6379/0"
    provider_type: str = "mock"
    model: str = DEFAULT_ANTHROPIC_MODEL
    base_url: str | None = None
    retrieval_mode: str = "auto"
    embedding: str = "auto"
    workflow_matcher: str = "auto"
    reranker: str = "none"
    query_decompose: str = "none"
    corrective: str = "none"
    postprocessor: str = "none"
    query_transform: str = "none"
    adaptive: str = "none"
    chunker: str = "none"
    vector_store: str = "none"
    persistence_policy: str = "default"
    reference_date: str | None = None
    faq_source: str | None = None
    allowed_upload_root: str | None = None
    company_profile_path: str | None = None
    tokens_per_minute: int = 0
    dify_run_enabled: bool = False
    dify_run_timeout_s: float = 10.0
    dify_run_isolation: str = "inprocess"
    studio_dir: str = str(_PACKAGED_STUDIO_DIR)
    dify_public_apps: str = ""
    n8n_api_key: str | None = None
    n8n_store_path: str = "data/n8n_store"

    def __post_init__(self) -> None:
        if not isinstance(self.db_path, str | Path) or not str(self.db_path).strip():
            raise ValueError(f"db_path must be a non-empty path, got {self.db_path!r}")
        self.reference_date_obj()  # a malformed date is refused here, not at first use

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServiceConfig:
        """The config from ``env`` (the process environment when None): each field from ``RAGSPINE_`` and
        its name in capitals (``RAGSPINE_RETRIEVAL_MODE``), the profile path from
        ``RAGSPINE_COMPANY_CONFIG``, the database from ``RAGSPINE_DB_PATH`` (default
        ``data/ragspine.db``). ``ValueError`` naming the variable for a value of the wrong type."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for item in fields(cls):
            name = (
                "RAGSPINE_COMPANY_CONFIG"
                if item.name == "company_profile_path"
                else f"RAGSPINE_{item.name.upper()}"
            )
            raw = source.get(name)
            if raw is None:
                continue
            values[item.name] = _parse(name, raw, item.type)
        values.setdefault("db_path", "data/ragspine.db")
        return cls(**values)

    def reference_date_obj(self) -> date | None:
        """``reference_date`` (ISO ``YYYY-MM-DD``) as a date, or None when unset."""
        if not self.reference_date:
            return None
        try:
            return date.fromisoformat(str(self.reference_date).strip())
        except ValueError:
            raise ValueError(
                f"reference_date must be an ISO date YYYY-MM-DD, got {self.reference_date!r}"
            ) from None

    def to_settings(self, base: Settings | None = None) -> Settings:
        """This package's ``Settings`` with the retrieval fields of this config (others from ``base``)."""
        chosen: dict[str, Any] = {
            "retrieval_mode": self.retrieval_mode,
            "embedding": self.embedding,
            "reranker": self.reranker,
            "query_decompose": self.query_decompose,
            "corrective": self.corrective,
            "postprocessor": self.postprocessor,
            "query_transform": self.query_transform,
            "adaptive": self.adaptive,
            "chunker": self.chunker,
            "vector_store": self.vector_store,
        }
        if self.company_profile_path:
            chosen["company_config"] = self.company_profile_path
        return replace(base or Settings(), **chosen)


def _parse(name: str, raw: str, kind: Any) -> Any:
    text = str(raw).strip()
    kind = str(kind)
    if kind == "bool":
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{name} must be true or false, got {raw!r}")
    if kind in ("int", "float"):
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if kind.endswith("| None") and not text:
        return None
    return text


def build_provider(config: ServiceConfig) -> LLMProvider:
    """The LLM provider ``config.provider_type`` names: ``mock`` (offline, answers as of
    ``reference_date``), ``anthropic`` (``model``, ``base_url``; the key is passed to ``AnthropicProvider``
    by code that has one) or ``openai`` (any OpenAI-compatible server at ``base_url``)."""
    kind = (config.provider_type or "mock").strip().lower().replace("-", "_")
    if kind == "mock":
        return MockProvider(reference_date=config.reference_date_obj())
    if kind == "anthropic":
        return AnthropicProvider(model=config.model, base_url=config.base_url)
    if kind in ("openai", "openai_compatible"):
        if not config.base_url:
            raise ValueError(
                "provider_type 'openai' needs base_url (RAGSPINE_BASE_URL), e.g. http://127.0.0.1:8000/v1"
            )
        return OpenAICompatibleProvider(config.base_url, model=config.model)
    raise ValueError(
        f"unknown provider_type {config.provider_type!r}; choose one of: {', '.join(PROVIDER_TYPES)}"
    )


def provider_config_dict(config: ServiceConfig) -> dict[str, object]:
    """What the provider is built from (no credentials), for logs and health pages."""
    return {"provider_type": config.provider_type, "model": config.model, "base_url": config.base_url}


@contextmanager
def open_fact_store(config: ServiceConfig) -> Iterator[Any]:
    """The fact store at ``config.db_path`` (SQLite), closed on exit."""
    from ragspine.stores.fact_store import SqliteFactStore

    store = SqliteFactStore(config.db_path)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def open_narrative_retriever(
    config: ServiceConfig, provider: LLMProvider | None
) -> Iterator[NarrativeRetriever | None]:
    """The narrative retriever over ``config.chunk_db_path`` (None when that is unset), assembled from the
    config's retrieval choices; its chunk store is closed on exit. ``provider`` gives the listwise judge
    when no model reranker is configured."""
    if not config.chunk_db_path:
        yield None
        return
    from ragspine.retrieval.link.narrative_link import build_narrative_retriever
    from ragspine.retrieval.mode import make_retrieval_mode
    from ragspine.retrieval.rerank.cross_encoder import build_reranker
    from ragspine.retrieval.vector.embedding_backends import make_embedding_backend

    settings = config.to_settings()
    mode = make_retrieval_mode(settings=settings)
    embedding = make_embedding_backend(settings=settings) if mode.uses_embedding else None
    reranker = None if is_off(config.reranker) else build_reranker(settings=settings)
    policy = None if config.persistence_policy in ("", "default") else config.persistence_policy
    retriever, store = build_narrative_retriever(
        config.chunk_db_path,
        provider,
        embedding_backend=embedding,
        persistence_policy=policy,
        reranker=reranker,
        settings=settings,
    )
    try:
        yield retriever
    finally:
        store.close()


class PathNotAllowedError(ValueError):
    """A file outside the allowed upload root, or of a kind that is not accepted."""


def validate_ingest_path(path: str | Path, config: ServiceConfig, *, suffixes: tuple[str, ...]) -> Path:
    """``path`` resolved, when it is an existing file with one of ``suffixes`` inside
    ``config.allowed_upload_root`` (anywhere when that is unset); else ``PathNotAllowedError`` saying why."""
    resolved = Path(path).expanduser().resolve()
    wanted = tuple(s.lower() if s.startswith(".") else f".{s.lower()}" for s in suffixes)
    if wanted and resolved.suffix.lower() not in wanted:
        raise PathNotAllowedError(f"{resolved.name}: only {', '.join(wanted)} files can be ingested")
    if config.allowed_upload_root:
        root = Path(config.allowed_upload_root).expanduser().resolve()
        if not resolved.is_relative_to(root):
            raise PathNotAllowedError(f"{resolved} is outside the allowed upload root {root}")
    if not resolved.is_file():
        raise PathNotAllowedError(f"{resolved} is not a file")
    return resolved
