"""The settings object: every ``RAGSPINE_*`` variable read into its typed field, unknown names refused with
the closest known one, the allow-list, the nine groups as typed views of one set of fields, the fields'
descriptions, and the names deployments set still known."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import fields
from pathlib import Path

import pytest

from ragspine.settings import (
    ALLOW_VARIABLE,
    GROUPS,
    NOT_SETTINGS,
    VARIABLES,
    LimitsSettings,
    RetrievalSettings,
    Settings,
    field_type,
    spec_env_default,
    unknown_variables,
    variable,
)

ROOT = Path(__file__).resolve().parents[2]

# Every variable deployments may set today (the flat Settings before the groups, plus the two names the
# old catch-all ``extra`` passed on): none may disappear or be renamed.
PUBLISHED = {
    "RAGSPINE_ADAPTIVE", "RAGSPINE_AUTH_TOKENS_FILE", "RAGSPINE_CHUNKER", "RAGSPINE_COMPANY_CONFIG",
    "RAGSPINE_CONTEXTUAL", "RAGSPINE_CORRECTIVE", "RAGSPINE_DATA_DIR", "RAGSPINE_DEVICE",
    "RAGSPINE_DOC_WEIGHT", "RAGSPINE_EMBEDDING", "RAGSPINE_EMBEDDING_BACKEND", "RAGSPINE_EMBEDDING_MODEL",
    "RAGSPINE_FACT_STORE", "RAGSPINE_FILTER_EXTRACTOR", "RAGSPINE_FRONT_PORT", "RAGSPINE_GLOSSARY_PATH",
    "RAGSPINE_GRAPH_STORE", "RAGSPINE_HEAP_TRIM_BYTES", "RAGSPINE_HOST", "RAGSPINE_HTTP_ALLOWED_ORIGINS",
    "RAGSPINE_HTTP_MAX_BODY_BYTES", "RAGSPINE_HTTP_PORT", "RAGSPINE_HTTP_TIMEOUT_S",
    "RAGSPINE_INDEX_BACKEND", "RAGSPINE_LARGE_CALLS_PER_CALLER", "RAGSPINE_LIBRARY_LIST_POLL_S",
    "RAGSPINE_LIBRARY_ROUTER", "RAGSPINE_LISTWISE_JUDGE", "RAGSPINE_LLM_API_KEY", "RAGSPINE_LLM_BASE_URL",
    "RAGSPINE_LLM_DEADLINE_S", "RAGSPINE_LLM_MODEL", "RAGSPINE_LLM_PROVIDER", "RAGSPINE_LLM_RETRIES",
    "RAGSPINE_MALLOC_ARENA_MAX", "RAGSPINE_MAX_CHUNKS_PER_DOCUMENT", "RAGSPINE_MAX_CONCURRENT_INGESTS",
    "RAGSPINE_MAX_DECOMPRESSION_RATIO", "RAGSPINE_MAX_DOCUMENT_PAGES", "RAGSPINE_MAX_DOCUMENT_PIXELS",
    "RAGSPINE_MAX_DOCUMENT_TEXT_CHARS", "RAGSPINE_MAX_HEAVY_RETRIEVES", "RAGSPINE_MAX_LIBRARIES",
    "RAGSPINE_MAX_OPEN_LIBRARIES", "RAGSPINE_MAX_PAGE_PIXELS", "RAGSPINE_MAX_QUEUED_CALLS",
    "RAGSPINE_MAX_RUNNING_CALLS", "RAGSPINE_MAX_STREAM_BYTES", "RAGSPINE_MAX_STREAM_DOCUMENTS",
    "RAGSPINE_METRICS_HOST", "RAGSPINE_METRICS_PORT", "RAGSPINE_MIN_ANSWER_RELEVANCE",
    "RAGSPINE_MIN_RELEVANCE", "RAGSPINE_MODEL_CALL_SLOTS", "RAGSPINE_NARRATIVE_GRAPH",
    "RAGSPINE_OPENAI_API_KEY", "RAGSPINE_OPENAI_BASE_URL", "RAGSPINE_OPENAI_EMBEDDING_MODEL",
    "RAGSPINE_OTLP_ENDPOINT", "RAGSPINE_OTLP_SAMPLE_RATIO", "RAGSPINE_PARSE_MEMORY_BYTES",
    "RAGSPINE_POSTPROCESSOR", "RAGSPINE_QDRANT_API_KEY", "RAGSPINE_QDRANT_COLLECTION_PREFIX",
    "RAGSPINE_QDRANT_TIMEOUT_S", "RAGSPINE_QDRANT_URL", "RAGSPINE_QUERY_DECOMPOSE",
    "RAGSPINE_QUERY_TRANSFORM", "RAGSPINE_QUEUE_WAIT_S", "RAGSPINE_RAPTOR", "RAGSPINE_RAPTOR_SUMMARIZER",
    "RAGSPINE_RELATION_EXTRACTOR", "RAGSPINE_RERANKER", "RAGSPINE_RERANKER_MODEL",
    "RAGSPINE_RETRIEVAL_MODE", "RAGSPINE_SHUTDOWN_GRACE_S", "RAGSPINE_SPARSE_MODEL",
    "RAGSPINE_STORE_CHANGE_POLL_S", "RAGSPINE_STORE_DSN", "RAGSPINE_TLS_CERT_FILE",
    "RAGSPINE_TLS_KEY_FILE", "RAGSPINE_VECTOR_BATCH_SIZE", "RAGSPINE_VECTOR_BATCH_TOKENS",
    "RAGSPINE_VECTOR_DRAIN_CONCURRENCY", "RAGSPINE_VECTOR_STORE", "RAGSPINE_VISUAL_EMBEDDER",
    "RAGSPINE_VISUAL_MODEL", "RAGSPINE_WORKER_ADDRESS", "RAGSPINE_WORKER_BREAKER_FAILURES",
    "RAGSPINE_WORKER_BREAKER_OPEN_S", "RAGSPINE_WORKER_FALLBACK_RESERVE_S",
    "RAGSPINE_WORKER_MAX_IN_FLIGHT", "RAGSPINE_WORKER_PORT", "RAGSPINE_WORKER_RESERVE_FRACTION",
    "RAGSPINE_WORKER_TIMEOUT_S", "RAGSPINE_WORKER_TLS_CA_FILE", "RAGSPINE_WORKER_TOKEN",
}  # fmt: skip
SAMPLE = {str: " some-value ", int: "7", float: "0.25"}
PARSED = {str: "some-value", int: 7, float: 0.25}


# ------------------------------------------------------------------------------------------- reading


def test_no_published_variable_is_gone() -> None:
    assert sorted(PUBLISHED - VARIABLES) == []


@pytest.mark.parametrize("name", sorted(f.name for f in fields(Settings)))
def test_every_variable_is_read_into_its_field(name: str) -> None:
    f = next(f for f in fields(Settings) if f.name == name)
    kind = field_type(f)
    settings = Settings.from_env({variable(name): SAMPLE[kind]})
    assert getattr(settings, name) == PARSED[kind] != f.default
    assert type(getattr(settings, name)) is kind


def test_a_value_that_does_not_parse_names_its_variable() -> None:
    with pytest.raises(ValueError, match=r"^RAGSPINE_FRONT_PORT='eighty' is not an integer$"):
        Settings.from_env({"RAGSPINE_FRONT_PORT": "eighty"})
    with pytest.raises(ValueError, match=r"^RAGSPINE_QUEUE_WAIT_S='1s' is not a number$"):
        Settings.from_env({"RAGSPINE_QUEUE_WAIT_S": "1s"})


def test_overrides_win_and_none_means_not_given() -> None:
    env = {"RAGSPINE_HOST": "0.0.0.0", "RAGSPINE_FRONT_PORT": "9000"}
    settings = Settings.from_env(env, host="127.0.0.2", front_port=None)
    assert (settings.host, settings.front_port) == ("127.0.0.2", 9000)


# ---------------------------------------------------------------------------------- unknown variables


def test_a_misspelt_variable_is_refused_naming_the_closest_setting() -> None:
    with pytest.raises(ValueError) as info:
        Settings.from_env({"RAGSPINE_RETRIVAL_MODE": "bm25"})
    message = str(info.value)
    assert "RAGSPINE_RETRIVAL_MODE (did you mean RAGSPINE_RETRIEVAL_MODE?)" in message
    assert ALLOW_VARIABLE in message and "\n" not in message


def test_every_unknown_variable_is_named_at_once() -> None:
    env = {"RAGSPINE_RERANKR": "ce", "RAGSPINE_COMPLETELY_DIFFERENT_THING": "1", "RAGSPINE_HOST": "h"}
    with pytest.raises(ValueError) as info:
        Settings.from_env(env)
    message = str(info.value)
    assert "RAGSPINE_RERANKR (did you mean RAGSPINE_RERANKER?)" in message
    assert "RAGSPINE_COMPLETELY_DIFFERENT_THING" in message and "RAGSPINE_HOST" not in message


def test_names_that_are_not_ragspine_variables_are_none_of_its_business() -> None:
    env = {"PATH": "/bin", "ragspine_retrival_mode": "bm25", "XRAGSPINE_FOO": "1", "RAGSPINE": "1"}
    assert Settings.from_env(env) == Settings()


def test_the_projects_own_non_settings_pass() -> None:
    assert {"RAGSPINE_TOKEN", "RAGSPINE_SHARED_DATA", ALLOW_VARIABLE} <= set(NOT_SETTINGS)
    assert Settings.from_env({**dict.fromkeys(NOT_SETTINGS, "x"), ALLOW_VARIABLE: ""}) == Settings()
    assert not set(NOT_SETTINGS) & VARIABLES


def test_the_allow_list_lets_named_and_prefixed_variables_through() -> None:
    env = {
        ALLOW_VARIABLE: "RAGSPINE_RELEASE, RAGSPINE_DEPLOY_*",
        "RAGSPINE_RELEASE": "42",
        "RAGSPINE_DEPLOY_ID": "a",
        "RAGSPINE_DEPLOY_REGION": "b",
        "RAGSPINE_RETRIEVAL_MODE": "bm25",
    }
    assert Settings.from_env(env).retrieval_mode == "bm25"
    # The allow-list is exact: a prefix lets through its own names, not a typo of a setting elsewhere.
    with pytest.raises(ValueError, match="RAGSPINE_RELEASES"):
        Settings.from_env({**env, "RAGSPINE_RELEASES": "1"})
    with pytest.raises(ValueError, match="RAGSPINE_RETRIVAL_MODE"):
        Settings.from_env({**env, "RAGSPINE_RETRIVAL_MODE": "bm25"})
    assert unknown_variables({ALLOW_VARIABLE: "RAGSPINE_*", "RAGSPINE_ANYTHING": "1"}) == []


def test_a_malformed_allow_list_is_refused() -> None:
    with pytest.raises(ValueError, match=r"RAGSPINE_SETTINGS_ALLOW: 'DEPLOY_ID' is not a RAGSPINE_\* name"):
        Settings.from_env({ALLOW_VARIABLE: "DEPLOY_ID"})


def test_the_cli_prints_an_unknown_variable_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from ragspine.cli import main

    monkeypatch.setenv("RAGSPINE_RETRIVAL_MODE", "bm25")
    code = main(["reindex", "--data-dir", str(tmp_path), "--library", "x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("ragspine reindex: error: unknown RAGSPINE_* variable")
    assert "did you mean RAGSPINE_RETRIEVAL_MODE?" in err


def test_spec_env_default_reads_only_its_listed_variables() -> None:
    env = {
        "RAGSPINE_EMBEDDING_BACKEND": "deterministic",
        "RAGSPINE_RETRIEVAL_MODE": "bm25",
        "RAGSPINE_TYPO": "1",
    }
    got = spec_env_default("ragspine.retrieval.vector.embedding_backends.make_embedding_backend", env)
    assert (
        got.embedding_backend == "deterministic" and got.retrieval_mode == "auto"
    )  # the mode is not its business
    # The service's selector is not the library call's: RAGSPINE_EMBEDDING is not read there.
    only_service = spec_env_default(
        "ragspine.retrieval.vector.embedding_backends.make_embedding_backend", {"RAGSPINE_EMBEDDING": "none"}
    )
    assert only_service.embedding == "auto"
    with pytest.raises(ValueError, match="RAGSPINE_HTTP_TIMEOUT_S"):
        spec_env_default(
            "ragspine.retrieval.vector.embedding_backends.make_embedding_backend",
            {"RAGSPINE_HTTP_TIMEOUT_S": "soon"},
        )
    with pytest.raises(KeyError):
        spec_env_default("ragspine.retrieval.mode.make_retrieval_mode", env)


# ------------------------------------------------------------------------------------------- groups


def test_each_field_belongs_to_exactly_one_group_and_the_groups_make_settings() -> None:
    grouped = [f.name for _, group in GROUPS for f in fields(group)]
    assert sorted(grouped) == sorted(f.name for f in fields(Settings))
    assert len(grouped) == len(set(grouped))
    assert {group for _, group in GROUPS} == {b for b in Settings.__mro__[1:] if dataclasses.is_dataclass(b)}
    assert not {attribute for attribute, _ in GROUPS} & {f.name for f in fields(Settings)}


def test_a_group_view_holds_the_same_values_typed_and_frozen() -> None:
    s = Settings(retrieval_mode="bm25", max_document_pages=3, data_dir="/d", otlp_endpoint="http://o:4317")
    assert s.retrieval == RetrievalSettings(retrieval_mode="bm25")
    assert s.limits.max_document_pages == 3 and s.stores.data_dir == "/d"
    assert s.tracing.otlp_endpoint == "http://o:4317"
    for attribute, group in GROUPS:
        view = getattr(s, attribute)
        assert type(view) is group
        assert all(getattr(view, f.name) == getattr(s, f.name) for f in fields(group))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.limits.max_document_pages = 4  # type: ignore[misc]
    # A component that asks for one group may be handed the whole settings.
    assert isinstance(s, LimitsSettings) and isinstance(s, RetrievalSettings)


def test_flat_construction_replace_and_group_properties_keep_working() -> None:
    s = dataclasses.replace(Settings(data_dir="/a", host="h"), retrieval_mode="economy", metrics_host="")
    assert (s.data_dir, s.retrieval_mode, s.metrics_bind_host) == ("/a", "economy", "h")
    assert s.service.metrics_bind_host == "h" and s.models.embedding_spec == "auto"
    with pytest.raises(TypeError):
        Settings(retrieval_mod="bm25")  # type: ignore[call-arg]
    assert Settings() == Settings() and hash(Settings()) == hash(Settings())


def test_every_field_has_a_type_a_matching_default_and_a_one_line_description() -> None:
    for f in fields(Settings):
        kind = field_type(f)
        assert isinstance(f.default, kind) and not isinstance(f.default, bool), f.name
        doc = f.metadata.get("doc", "")
        assert doc and "\n" not in doc and doc.endswith(".") and len(doc) < 240, f.name
    for _, group in GROUPS:
        assert (group.__doc__ or "").strip(), group.__name__


# -------------------------------------------------------------------------------- deployment tooling

_NAME = re.compile(r"RAGSPINE_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_]*\*)")


def named_variables(text: str) -> set[str]:
    """The ``RAGSPINE_*`` names ``text`` mentions (prefix patterns such as ``RAGSPINE_LLM_*`` left out)."""
    return set(_NAME.findall(text))


def test_every_variable_the_chart_and_scripts_set_is_known() -> None:
    files = [
        *ROOT.joinpath("helm").rglob("*"),
        *ROOT.joinpath("scripts").rglob("*"),
        *ROOT.glob("Dockerfile*"),
    ]
    mentioned: dict[str, str] = {}
    for path in files:
        if path.is_file():
            for name in named_variables(path.read_text("utf-8", errors="replace")):
                mentioned.setdefault(name, path.relative_to(ROOT).as_posix())
    assert {"RAGSPINE_RETRIEVAL_MODE", "RAGSPINE_WORKER_ADDRESS"} <= set(mentioned)
    assert {name: where for name, where in mentioned.items() if unknown_variables({name: ""})} == {}


def test_reverse_proof_the_name_scan_sees_a_bad_name() -> None:
    text = "env:\n  - name: RAGSPINE_RETRIVAL_MODE\n    value: bm25\n# RAGSPINE_LLM_* are optional\n"
    assert named_variables(text) == {"RAGSPINE_RETRIVAL_MODE"}
    assert unknown_variables(dict.fromkeys(named_variables(text), "")) == ["RAGSPINE_RETRIVAL_MODE"]
