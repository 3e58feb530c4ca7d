"""Settings reach every factory as an argument, and "none" is decided in one place.

- A factory given ``settings=`` never reads the environment (``Settings.from_env`` is trapped here; a
  reverse proof shows the trap fires for a call that does read it), nor does one given no settings at all:
  it takes the defaults, whatever ``RAGSPINE_*`` says (the spec-documented environment defaults aside;
  tests/layout/test_environment_reads.py scans the source for the same rule).
- ``ragspine.settings.choice`` is the only code that compares a selector with "none": an ``ast`` scan of
  the tree finds no other comparison (reverse proof: the scan flags the pattern this replaced).
- Front and worker read one description of the models (``Settings.model_specs``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.agent.decompose import make_decomposer
from ragspine.agent.query_transform import make_adaptive_decomposer, make_query_transform
from ragspine.common.choices import strict_choices
from ragspine.common.company_profile import load_company_profile
from ragspine.graph.extractor import make_relation_extractor
from ragspine.graph.narrative import make_narrative_graph
from ragspine.graph.store import make_graph_store
from ragspine.retrieval.assembly import assemble_index
from ragspine.retrieval.chunking.chunk_store import ChunkStore
from ragspine.retrieval.chunking.chunker import DefaultChunker, make_chunker
from ragspine.retrieval.contextual import make_index_text_fn
from ragspine.retrieval.corrective import make_corrective_retriever
from ragspine.retrieval.filtering.automatic import ControlledVocabFilterExtractor, make_filter_extractor
from ragspine.retrieval.link.providers import DeterministicProvider, make_llm_provider
from ragspine.retrieval.mode import make_retrieval_mode
from ragspine.retrieval.postprocess import make_postprocessor
from ragspine.retrieval.raptor import (
    ExtractiveRaptorSummarizer,
    make_raptor_retriever,
    make_raptor_summarizer,
)
from ragspine.retrieval.rerank.cross_encoder import build_reranker, make_reranker
from ragspine.retrieval.routing.router import KeywordLibraryRouter, make_library_router
from ragspine.retrieval.vector.embedding_backends import (
    DeterministicEmbeddingBackend,
    OpenAIEmbeddingBackend,
    make_embedding_backend,
)
from ragspine.retrieval.vector.store import InProcessVectorStore, make_vector_store
from ragspine.retrieval.visual.factory import make_visual_encoder
from ragspine.settings import OFF, ModelSpecs, Settings, choice, is_off, variable
from ragspine.storage.fact_store import make_fact_store

ROOT = Path(__file__).resolve().parents[2]


class EnvironmentRead(AssertionError):
    pass


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any ``Settings.from_env`` call fails the test: components must use the settings they are given."""

    def trap(cls: type[Settings], *args: Any, **kwargs: Any) -> Settings:
        raise EnvironmentRead("a component read the environment behind the settings it was given")

    monkeypatch.setattr(Settings, "from_env", classmethod(trap))
    yield


# -------------------------------------------------------------------------------------- choice / off


def test_choice_is_the_one_reading_of_off() -> None:
    for off in ("none", "NONE", " None ", "off", "OFF", " off\n"):
        assert choice(off) == OFF and is_off(off)
    assert choice("") == OFF and choice("  ") == OFF and choice(None) == OFF
    assert choice("", default="memory") == "memory" and not is_off("", default="memory")
    assert choice(" Keyword ") == "keyword" and not is_off("keyword")


OFF_FACTORIES = {
    "embedding": lambda spec, s: make_embedding_backend(spec, settings=s),
    "reranker": lambda spec, s: build_reranker(spec, settings=s),
    "vector store": lambda spec, s: make_vector_store(spec, settings=s),
    "library router": lambda spec, s: make_library_router(spec, settings=s),
    "filter extractor": lambda spec, s: make_filter_extractor(spec, settings=s),
    "llm provider": lambda spec, s: make_llm_provider(spec, settings=s),
    "visual encoder": lambda spec, s: make_visual_encoder(spec, settings=s),
}


@pytest.mark.parametrize("kind", sorted(OFF_FACTORIES))
@pytest.mark.parametrize("spelling", ["none", "None", " NONE ", "off", "Off"])
def test_every_factory_reads_off_the_same_way(kind: str, spelling: str, no_env: None) -> None:
    assert OFF_FACTORIES[kind](spelling, Settings()) is None


def test_blank_means_each_selectors_default(no_env: None) -> None:
    assert make_embedding_backend("", settings=Settings()) is None
    assert build_reranker("", settings=Settings()) is None
    assert isinstance(make_vector_store("", settings=Settings()), InProcessVectorStore)
    assert make_chunker("", settings=Settings()) is None  # blank: the caller's default (chunk_document)
    assert make_library_router("", settings=Settings()) is None
    assert make_visual_encoder("", settings=Settings()) is None


# ------------------------------------------------------------------------------- no environment behind


def test_factories_take_everything_from_the_settings_given(no_env: None) -> None:
    s = Settings(
        embedding="deterministic",
        retrieval_mode="bm25",
        library_router="keyword",
        filter_extractor="vocab",
        llm_provider="deterministic",
        vector_store="memory",
        openai_base_url="http://127.0.0.1:9/v1",
        openai_embedding_model="embedder-x",
    )
    assert isinstance(make_embedding_backend(settings=s), DeterministicEmbeddingBackend)
    openai = make_embedding_backend("openai", settings=s)
    assert isinstance(openai, OpenAIEmbeddingBackend)
    assert make_retrieval_mode(settings=s).name == "economy"
    assert isinstance(make_library_router(settings=s), KeywordLibraryRouter)
    assert isinstance(make_filter_extractor(settings=s), ControlledVocabFilterExtractor)
    assert isinstance(make_llm_provider(settings=s), DeterministicProvider)
    assert isinstance(make_vector_store(settings=s), InProcessVectorStore)
    assert isinstance(make_chunker(settings=s), DefaultChunker)
    assert build_reranker(settings=s) is None
    assert make_visual_encoder(settings=s) is None


def test_assemble_index_reads_no_environment(no_env: None) -> None:
    store = ChunkStore(":memory:")
    s = Settings(embedding="deterministic", retrieval_mode="hybrid", filter_extractor="vocab", reranker="off")
    index = assemble_index(store, s)
    assert isinstance(index.embedding_backend, DeterministicEmbeddingBackend)
    assert index.filter_extractor is not None
    store.close()


def test_reverse_proof_the_trap_catches_an_environment_read(no_env: None) -> None:
    # The two spec-documented environment defaults do read it (through spec_env_default -> from_env).
    with pytest.raises(EnvironmentRead):
        make_embedding_backend()
    with pytest.raises(EnvironmentRead):
        make_reranker()
    with pytest.raises(EnvironmentRead):
        load_company_profile()


class _Base:
    def retrieve(self, query: str, *, filters: Any = None, top_k: int = 50) -> list[dict[str, Any]]:
        return []


# What every factory gives with neither a spec nor settings: the defaults of Settings().
BASE = _Base()
UNSET_FACTORIES: dict[str, tuple[Any, Any]] = {
    "retrieval_mode": (lambda: make_retrieval_mode().name, "auto"),
    "vector_store": (lambda: type(make_vector_store()), InProcessVectorStore),
    "chunker": (lambda: type(make_chunker()), DefaultChunker),
    "contextual": (lambda: make_index_text_fn(), None),
    "reranker": (lambda: build_reranker(), None),
    "library_router": (lambda: make_library_router(), None),
    "filter_extractor": (lambda: make_filter_extractor(), None),
    "llm_provider": (lambda: make_llm_provider(), None),
    "visual_embedder": (lambda: make_visual_encoder(), None),
    "postprocessor": (lambda: make_postprocessor(), None),
    "corrective": (lambda: make_corrective_retriever(BASE), BASE),
    "query_transform": (lambda: make_query_transform(BASE), BASE),
    "adaptive": (lambda: make_adaptive_decomposer(), None),
    "query_decompose": (lambda: make_decomposer(), None),
    "raptor": (lambda: make_raptor_retriever(BASE), BASE),
    "raptor_summarizer": (lambda: type(make_raptor_summarizer()), ExtractiveRaptorSummarizer),
    "fact_store": (lambda: make_fact_store(), None),
    "graph_store": (lambda: make_graph_store(), None),
    "relation_extractor": (lambda: make_relation_extractor(), None),
    "narrative_graph": (lambda: make_narrative_graph(), None),
}
# A value for each variable that would change what the factory gives, were it read.
NON_DEFAULT = {
    "retrieval_mode": "bm25",
    "vector_store": "none",
    "chunker": "layout",
    "contextual": "header",
    "reranker": "no_such_reranker",  # names, not models: nothing is loaded (or downloaded) to tell
    "library_router": "keyword",
    "filter_extractor": "vocab",
    "llm_provider": "deterministic",
    "visual_embedder": "no_such_family",
    "postprocessor": "mmr",
    "corrective": "on",
    "query_transform": "hyde",
    "adaptive": "heuristic",
    "query_decompose": "heuristic",
    "raptor": "on",
    "raptor_summarizer": "none",
    "fact_store": "sqlite:/nonexistent/facts.sqlite",
    "graph_store": "memory",
    "relation_extractor": "cooccurrence",
    "narrative_graph": "llm",
}


@pytest.mark.parametrize("kind", sorted(UNSET_FACTORIES))
def test_a_factory_without_settings_takes_the_defaults_not_the_environment(
    kind: str, monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    make, default = UNSET_FACTORIES[kind]
    assert make() == default
    field = kind.removesuffix(" (seam)")
    monkeypatch.setenv(variable(field), NON_DEFAULT[field])
    monkeypatch.setenv("RAGSPINE_RETRIVAL_MODE", "bm25")  # not even an unknown name is looked at
    assert make() == default


def test_reverse_proof_each_non_default_value_changes_what_the_factory_gives(tmp_path: Path) -> None:
    """The values above do change each factory's answer when passed as settings, so the test before
    would see them had a factory read them."""
    changed = []
    for kind, (_, default) in UNSET_FACTORIES.items():
        field = kind.removesuffix(" (seam)")
        value = NON_DEFAULT[field] if field != "fact_store" else f"sqlite:{tmp_path / 'f.sqlite'}"
        s = Settings(**{field: value})
        try:
            with strict_choices():  # a choice the factory cannot honour is refused, not dropped
                got = _with_settings(kind, s)
        except ValueError:  # an unknown name, or hyde / llm / raptor without their LLM or embedder
            got = "refused"
        if got != default:
            changed.append(kind)
    assert sorted(changed) == sorted(UNSET_FACTORIES)


def _with_settings(kind: str, s: Settings) -> Any:
    calls: dict[str, Any] = {
        "retrieval_mode": lambda: make_retrieval_mode(settings=s).name,
        "vector_store": lambda: type(make_vector_store(settings=s)),
        "chunker": lambda: type(make_chunker(settings=s)),
        "contextual": lambda: make_index_text_fn(settings=s),
        "reranker": lambda: build_reranker(settings=s),
        "library_router": lambda: make_library_router(settings=s),
        "filter_extractor": lambda: make_filter_extractor(settings=s),
        "llm_provider": lambda: make_llm_provider(settings=s),
        "visual_embedder": lambda: make_visual_encoder(settings=s),
        "postprocessor": lambda: make_postprocessor(settings=s),
        "corrective": lambda: make_corrective_retriever(BASE, settings=s),
        "query_transform": lambda: make_query_transform(BASE, settings=s),
        "adaptive": lambda: make_adaptive_decomposer(settings=s),
        "query_decompose": lambda: make_decomposer(settings=s),
        "raptor": lambda: make_raptor_retriever(BASE, settings=s),
        "raptor_summarizer": lambda: type(make_raptor_summarizer(settings=s)),
        "fact_store": lambda: make_fact_store(settings=s),
        "graph_store": lambda: make_graph_store(settings=s),
        "relation_extractor": lambda: make_relation_extractor(settings=s),
        "narrative_graph": lambda: make_narrative_graph(settings=s),
    }
    return calls[kind]()


def test_the_pgvector_dsn_comes_from_the_settings_not_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With settings passed, RAGSPINE_STORE_DSN is never a fallback (nor needed: see tests/postgres)."""
    monkeypatch.setenv("RAGSPINE_STORE_DSN", "postgresql://someone@127.0.0.1:1/elsewhere")
    with pytest.raises(ValueError, match="needs a DSN"):
        make_vector_store("pgvector", settings=Settings(vector_store="pgvector"))


# ----------------------------------------------------------------------------------- one model spec


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (Settings(), ModelSpecs(embedding="auto", sparse="", reranker="", visual="")),
        (
            Settings(embedding="OFF", reranker=" None ", retrieval_mode="full", visual_embedder="ColQwen2"),
            ModelSpecs(embedding="", sparse="splade", reranker="", visual="colqwen2"),
        ),
        (
            Settings(embedding_backend="e5", sparse_model="m/splade", reranker="colbert",
                     visual_embedder="colpali", visual_model="org/colpali"),
            ModelSpecs(embedding="e5", sparse="m/splade", reranker="colbert", visual="colpali:org/colpali"),
        ),
        (
            Settings(visual_embedder="colqwen2:local/dir", visual_model="ignored"),
            ModelSpecs(embedding="auto", sparse="", reranker="", visual="colqwen2:local/dir"),
        ),
    ],
)
def test_model_specs(settings: Settings, expected: ModelSpecs) -> None:
    assert settings.model_specs == expected


def test_the_worker_loads_what_model_specs_say(no_env: None) -> None:
    pytest.importorskip("grpc")
    from ragspine_services.worker.server import registry_from_settings

    s = Settings(embedding="deterministic", reranker="off", retrieval_mode="sparse", visual_embedder="none")
    registry = registry_from_settings(s)
    got = ModelSpecs(
        registry.embedding_spec, registry.sparse_spec, registry.reranker_spec, registry.visual_spec
    )
    assert got == s.model_specs
    assert not registry.offers_visual
    # The embedding model is built with the settings given (the environment is trapped).
    assert isinstance(registry.embedding(), DeterministicEmbeddingBackend)


def test_model_specs_refuse_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown retrieval mode 'turbo'"):
        _ = Settings(retrieval_mode="turbo").model_specs


# ------------------------------------------------------------------------------ "none" in one place

# The wire's per-request reranker field ("" / "none" / the server's reranker) is a request value, not a
# setting; the servicer owns its vocabulary.
ALLOWED = {"services/ragspine_services/front/servicer.py"}


def none_comparisons(source: str) -> list[int]:
    """Lines where ``source`` compares something with the literal "none" (``==``, ``!=``, ``in``, ...)."""

    def mentions_none(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.strip().lower() == "none"
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(mentions_none(elt) for elt in node.elts)
        return False

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(mentions_none(c) for c in [node.left, *node.comparators]):
            lines.append(node.lineno)
    return lines


def test_only_settings_compares_with_none() -> None:
    offenders = []
    for path in sorted([*ROOT.joinpath("ragspine").rglob("*.py"), *ROOT.joinpath("services").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "ragspine/settings.py" or rel in ALLOWED or "/_gen/" in rel:
            continue
        offenders += [f"{rel}:{line}" for line in none_comparisons(path.read_text("utf-8"))]
    assert offenders == [], "compare with ragspine.settings.choice / is_off instead"


def test_reverse_proof_the_scan_finds_hand_written_none_checks() -> None:
    assert none_comparisons('if name in ("", "none"):\n    pass\n') == [1]
    assert none_comparisons('x = spec != "none"\n') == [1]
    assert none_comparisons('if (spec or "none").strip() == "none": pass\n') == [1]
    assert none_comparisons('CHOICES = ("none", "keyword")\nlog.info("none")\n') == []
