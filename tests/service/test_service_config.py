"""``ragspine.service.config``: the published ``ServiceConfig`` read from the environment, turned into
``Settings``, the retrieval presets, the providers it names, the retriever it opens over a real SQLite
chunk database, and the ingest path check."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from ragspine.agent.llm_provider import AnthropicProvider, MockProvider
from ragspine.retrieval.llm.completion import reply_text
from ragspine.retrieval.llm.providers import OpenAICompatibleProvider
from ragspine.service.config import (
    PathNotAllowedError,
    RetrievalPreset,
    RetrievalProfile,
    ServiceConfig,
    build_provider,
    make_retrieval_preset,
    open_fact_store,
    open_narrative_retriever,
    provider_config_dict,
    validate_ingest_path,
)
from tests.agent.conftest import SECRET_MARKER, build_store


def test_defaults_and_from_env() -> None:
    config = ServiceConfig(db_path="facts.db")
    assert (config.retrieval_mode, config.embedding, config.reranker, config.provider_type) == (
        "auto",
        "auto",
        "none",
        "mock",
    )
    env = {
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_CHUNK_DB_PATH": "/data/chunks.db",
        "RAGSPINE_COMPANY_CONFIG": "/etc/acme.toml",
        "RAGSPINE_DIFY_RUN_ENABLED": "true",
        "RAGSPINE_TOKENS_PER_MINUTE": "120",
        "RAGSPINE_DIFY_RUN_TIMEOUT_S": "2.5",
        "RAGSPINE_REFERENCE_DATE": "2025-03-31",
        "UNRELATED": "x",
    }
    read = ServiceConfig.from_env(env)
    assert read.db_path == "data/ragspine.db" and read.chunk_db_path == "/data/chunks.db"
    assert read.retrieval_mode == "economy" and read.company_profile_path == "/etc/acme.toml"
    assert read.dify_run_enabled is True and read.tokens_per_minute == 120 and read.dify_run_timeout_s == 2.5
    assert read.reference_date_obj() == date(2025, 3, 31)
    with pytest.raises(ValueError, match="RAGSPINE_TOKENS_PER_MINUTE"):
        ServiceConfig.from_env({"RAGSPINE_TOKENS_PER_MINUTE": "many"})
    with pytest.raises(ValueError, match="RAGSPINE_DIFY_RUN_ENABLED"):
        ServiceConfig.from_env({"RAGSPINE_DIFY_RUN_ENABLED": "perhaps"})
    with pytest.raises(ValueError, match="ISO date"):
        ServiceConfig(db_path="x", reference_date="31/03/2025")
    with pytest.raises(ValueError, match="db_path"):
        ServiceConfig(db_path=" ")


def test_to_settings_carries_the_retrieval_fields() -> None:
    config = ServiceConfig(
        db_path="x",
        retrieval_mode="hybrid",
        reranker="colbert",
        postprocessor="mmr",
        chunker="laws",
        company_profile_path="/etc/acme.toml",
    )
    settings = config.to_settings()
    assert (settings.retrieval_mode, settings.reranker, settings.postprocessor, settings.chunker) == (
        "hybrid",
        "colbert",
        "mmr",
        "laws",
    )
    assert settings.company_config == "/etc/acme.toml"


def test_presets() -> None:
    economy = make_retrieval_preset()
    assert economy == RetrievalPreset("economy", "none", "none", "none", "none")
    quality = make_retrieval_preset("High-Quality", reranker="none")
    assert quality.retrieval_mode == "hybrid" and quality.embedding == "auto" and quality.reranker == "none"
    assert (
        make_retrieval_preset(RetrievalProfile.ECONOMY).with_overrides(embedding="auto").embedding == "auto"
    )
    assert RetrievalProfile("economy") is RetrievalProfile.ECONOMY and RetrievalProfile.ECONOMY == "economy"
    with pytest.raises(ValueError, match="economy, high_quality"):
        make_retrieval_preset("premium")
    with pytest.raises(ValueError, match="embedding"):
        economy.with_overrides(embedding=" ")


def test_providers() -> None:
    mock = build_provider(ServiceConfig(db_path="x", reference_date="2025-03-31"))
    assert isinstance(mock, MockProvider) and mock.today() == date(2025, 3, 31)
    assert reply_text(mock.chat([{"role": "user", "content": "ping"}])) == "ping"
    anthropic = build_provider(ServiceConfig(db_path="x", provider_type="anthropic", model="claude-test"))
    assert isinstance(anthropic, AnthropicProvider) and anthropic.model == "claude-test"
    openai = build_provider(
        ServiceConfig(db_path="x", provider_type="openai", base_url="http://127.0.0.1:9/v1")
    )
    assert isinstance(openai, OpenAICompatibleProvider)
    with pytest.raises(ValueError, match="base_url"):
        build_provider(ServiceConfig(db_path="x", provider_type="openai"))
    with pytest.raises(ValueError, match="mock, anthropic, openai"):
        build_provider(ServiceConfig(db_path="x", provider_type="gemini"))
    assert provider_config_dict(ServiceConfig(db_path="x")) == {
        "provider_type": "mock",
        "model": "claude-opus-4-8",
        "base_url": None,
    }


def test_open_narrative_retriever_over_a_real_chunk_database(tmp_path: Path) -> None:
    chunk_db = tmp_path / "chunks.db"
    _, store = build_store(chunk_db)
    store.close()
    config = ServiceConfig(
        db_path=str(tmp_path / "facts.db"), chunk_db_path=str(chunk_db), retrieval_mode="economy"
    )
    with open_narrative_retriever(config, MockProvider()) as retriever:
        assert retriever is not None
        snippets = retriever.retrieve("battery supplier shipment", top_k=3)
    assert snippets and snippets[0]["doc_id"].startswith("bat-")
    assert all(SECRET_MARKER not in s["text"] for s in snippets)
    with open_narrative_retriever(ServiceConfig(db_path="x"), None) as nothing:
        assert nothing is None
    with open_fact_store(config) as facts:
        assert list(facts.iter_current()) == []


def test_validate_ingest_path(tmp_path: Path) -> None:
    root = tmp_path / "uploads"
    root.mkdir()
    (root / "notes.md").write_text("# hi", encoding="utf-8")
    (tmp_path / "outside.md").write_text("# no", encoding="utf-8")
    config = ServiceConfig(db_path="x", allowed_upload_root=str(root))
    assert (
        validate_ingest_path(root / "notes.md", config, suffixes=(".md", ".txt"))
        == (root / "notes.md").resolve()
    )
    with pytest.raises(PathNotAllowedError, match="outside the allowed upload root"):
        validate_ingest_path(tmp_path / "outside.md", config, suffixes=(".md",))
    with pytest.raises(PathNotAllowedError, match="outside the allowed upload root"):
        validate_ingest_path(root / ".." / "outside.md", config, suffixes=(".md",))
    with pytest.raises(PathNotAllowedError, match=r"only \.pdf"):
        validate_ingest_path(root / "notes.md", config, suffixes=("pdf",))
    with pytest.raises(PathNotAllowedError, match="not a file"):
        validate_ingest_path(root / "absent.md", config, suffixes=(".md",))
    assert isinstance(PathNotAllowedError("x"), ValueError)
