"""values.schema.json accepts the shipped values and refuses values that would deploy something broken."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart_render import CHART_DIR, copy_chart, example_values, helm, merged, render

_PG_REPLICAS: dict[str, Any] = {"front.replicas": 2}

# (label, dotted overrides on the defaults, a word the error must name so a person can find the key)
BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    (
        "sqlite with two front replicas",
        {"store.backend": "sqlite", "front.replicas": 2, "front.autoscaling.enabled": False},
        "/front/replicas",
    ),
    (
        "sqlite with autoscaling",
        {"store.backend": "sqlite", "front.replicas": 1, "front.autoscaling.enabled": True},
        "/front/autoscaling",
    ),
    ("unknown store backend", {"store.backend": "mysql"}, "/store/backend"),
    ("postgresql without any database", {"store.backend": "postgresql", **_PG_REPLICAS}, "oneOf"),
    (
        "postgresql with a DSN and a Secret",
        {
            "store.backend": "postgresql",
            "externalPostgres.existingSecret": "pg",
            "externalPostgres.dsn": "postgresql://u:p@db/rag",
            **_PG_REPLICAS,
        },
        "oneOf",
    ),
    (
        "the chart's database and an external one",
        {
            "store.backend": "postgresql",
            "postgresql.enabled": True,
            "externalPostgres.existingSecret": "pg",
            **_PG_REPLICAS,
        },
        "oneOf",
    ),
    ("the chart's database under SQLite", {"postgresql.enabled": True}, "/store/backend"),
    (
        "a DSN that is not PostgreSQL",
        {"store.backend": "postgresql", "externalPostgres.dsn": "mysql://db/rag", **_PG_REPLICAS},
        "/externalPostgres/dsn",
    ),
    ("misspelt embedding backend", {"settings.embedding": "minilm-l6"}, "/settings/embedding"),
    ("reranker spelt with a hyphen", {"settings.reranker": "cross-encoder"}, "/settings/reranker"),
    ("unknown visual family", {"settings.visualEmbedder": "clip"}, "/settings/visualEmbedder"),
    ("a model id that is a path escape", {"worker.modelFetch.models": ["../x"]}, "/worker/modelFetch/models"),
    ("a database password that breaks the DSN", {"postgresql.password": "a@b"}, "/postgresql/password"),
    ("misspelt top-level key", {"fronts": {}}, "fronts"),
    ("misspelt nested key", {"worker.gpu.cuont": 1}, "cuont"),
    ("port out of range", {"front.port": 70000}, "/front/port"),
    ("zero GPUs on a GPU worker", {"cpuOnly": False, "worker.gpu.count": 0}, "/worker/gpu/count"),
    ("replicas as a string", {"worker.replicas": "two"}, "/worker/replicas"),
    ("unknown retrieval mode", {"settings.retrievalMode": "fast"}, "/settings/retrievalMode"),
    ("extra env outside RAGSPINE_", {"settings.extraEnv": {"PATH": "/tmp"}}, "RAGSPINE_"),
    ("root allowed", {"podSecurityContext.runAsNonRoot": False}, "/podSecurityContext/runAsNonRoot"),
    (
        "capabilities kept",
        {"securityContext.capabilities": {"drop": ["NET_RAW"]}},
        "/securityContext/capabilities",
    ),
    (
        "privilege escalation",
        {"securityContext.allowPrivilegeEscalation": True},
        "/securityContext/allowPrivilegeEscalation",
    ),
    ("TLS without its Secret", {"tls.enabled": True}, "/tls/secretName"),
    ("bad memory quantity", {"front.resources": {"requests": {"memory": "lots"}}}, "/front/resources"),
]


@pytest.mark.parametrize("name", [None, "gpu", "cpu"], ids=["default", "values-gpu", "values-cpu"])
def test_shipped_values_pass_the_schema(name: str | None) -> None:
    values = example_values(name) if name else None
    helm.Chart.load(str(CHART_DIR)).validate_schema(values)


@pytest.mark.parametrize(("label", "overrides", "names"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_schema_rejects_bad_values(label: str, overrides: dict[str, Any], names: str) -> None:
    values = merged(None, **overrides)
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert names in str(caught.value), f"{label}: error does not point at {names}: {caught.value}"


def _drop_schema_rules(chart: Path) -> None:
    schema_path = chart / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema.pop("allOf")
    schema_path.write_text(json.dumps(schema))


def test_reverse_proof_sqlite_rule_is_what_rejects(tmp_path: Path) -> None:
    """Without the schema's conditional rules the same SQLite values get through schema validation,
    so the rejection above comes from the rule and not from an unrelated mistake in the values."""
    chart = copy_chart(tmp_path)
    _drop_schema_rules(chart)
    values = merged(
        None, **{"store.backend": "sqlite", "front.replicas": 2, "front.autoscaling.enabled": False}
    )
    helm.Chart.load(str(chart)).validate_schema(values)


def test_templates_refuse_sqlite_replicas_even_without_the_schema(tmp_path: Path) -> None:
    """An install that skips schema validation still stops, with a message that says what to change."""
    chart = copy_chart(tmp_path)
    (chart / "values.schema.json").unlink()
    values = merged(
        None, **{"store.backend": "sqlite", "front.replicas": 3, "front.autoscaling.enabled": False}
    )
    with pytest.raises(helm.HelmError) as caught:
        render(values, chart_dir=chart)
    message = str(caught.value)
    assert "front.replicas=1" in message and "postgresql" in message
    # Reverse proof: the same schema-less chart renders a valid single-replica SQLite release.
    ok = merged(None, **{"store.backend": "sqlite", "front.replicas": 1, "front.autoscaling.enabled": False})
    assert render(ok, chart_dir=chart)


def test_templates_refuse_postgresql_without_dsn_even_without_the_schema(tmp_path: Path) -> None:
    chart = copy_chart(tmp_path)
    (chart / "values.schema.json").unlink()
    with pytest.raises(helm.HelmError, match=r"postgresql\.enabled=true .* externalPostgres\.existingSecret"):
        render(merged(None, **{"store.backend": "postgresql", "front.replicas": 2}), chart_dir=chart)
    with pytest.raises(helm.HelmError, match="not both"):
        both = {"store.backend": "postgresql", "postgresql.enabled": True, "externalPostgres.dsn": "postgresql://x"}
        render(merged(None, **both), chart_dir=chart)
