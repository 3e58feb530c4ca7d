"""``RAGSPINE_COMPANY_CONFIG`` reaches the StructuredService of a real loopback front: a fact written and
asked for in the profile's own vocabulary is found; the same front without the variable does not know the
vocabulary (the reverse proof: the setting, not something else, made the difference)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from ragspine.settings import Settings
from ragspine_services._gen import structured_pb2, structured_pb2_grpc
from ragspine_services.front.server import build_front_parts, start_front
from tests.service.helpers import free_port

PROFILE = """\
home_company_name = "Globex"
home_entity_code = "GLOBEX"

[home_entity_synonyms]
"环球香港" = "GLOBEX_HK"

[entity_geography]
GLOBEX_HK = "HK"

[[dimensions]]
name = "metric"
label = "Metric"
synonyms = { "churn" = "CHURN", "流失率" = "CHURN" }
units = { CHURN = "PCT" }
"""
FACTS = "metric,entity,period,value\n流失率,环球香港,2025Q3,4.2\n".encode()


@contextmanager
def front(settings: Settings) -> Iterator[structured_pb2_grpc.StructuredServiceStub]:
    parts = build_front_parts(settings)
    running = start_front(settings, parts, port=free_port())
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield structured_pb2_grpc.StructuredServiceStub(channel)
    finally:
        channel.close()
        running.stop(0)
        parts.close()


def _ingest_and_ask(stub: structured_pb2_grpc.StructuredServiceStub) -> tuple[Any, Any]:
    ingest = stub.IngestFacts(
        structured_pb2.IngestFactsRequest(library_id="fin", filename="q3.csv", content=FACTS), timeout=20
    )
    lookup = structured_pb2.MetricLookup(metric="流失率", entity="环球香港", period="2025Q3")
    answer = stub.QueryMetric(structured_pb2.QueryMetricRequest(library_id="fin", lookup=lookup), timeout=10)
    return ingest, answer


def test_the_company_config_variable_reaches_the_structured_service(tmp_path: Path) -> None:
    profile = tmp_path / "globex.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    base = {"RAGSPINE_RETRIEVAL_MODE": "economy", "RAGSPINE_EMBEDDING": "none"}

    configured = Settings.from_env(
        {**base, "RAGSPINE_COMPANY_CONFIG": str(profile), "RAGSPINE_DATA_DIR": str(tmp_path / "with")}
    )
    with front(configured) as stub:
        ingest, answer = _ingest_and_ask(stub)
    assert not ingest.errors and ingest.facts_written == 1
    assert answer.WhichOneof("result") == "found"
    fact = answer.found.fact
    assert (fact.metric_code, fact.entity, fact.value, fact.unit) == ("CHURN", "GLOBEX_HK", 4.2, "PCT")

    # Reverse proof: the same front and request without the variable: the built-in profile knows neither
    # the metric nor the entity.
    plain = Settings.from_env({**base, "RAGSPINE_DATA_DIR": str(tmp_path / "without")})
    with front(plain) as stub:
        ingest, answer = _ingest_and_ask(stub)
    assert ingest.facts_written == 0 and ingest.errors
    assert answer.WhichOneof("result") == "unrecognized_param"
