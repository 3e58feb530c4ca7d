"""What a platform engineer gets from the chart: defaults that install on a bare cluster, the bundled
PostgreSQL, load spread over workers, model fetching, placement knobs, ServiceMonitors, and a values table
that cannot drift from values.yaml."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart_render import (
    CHART_DIR,
    REPO_ROOT,
    Manifest,
    example_values,
    find,
    helm,
    merged,
    one,
    pod_spec,
    render,
)

_PG = {"store.backend": "postgresql", "postgresql.enabled": True, "front.autoscaling.enabled": True}


def _referenced_objects(docs: list[Manifest]) -> set[tuple[str, str]]:
    """(kind, name) of every Secret, ConfigMap and PersistentVolumeClaim a pod of ``docs`` refers to."""
    refs: set[tuple[str, str]] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "secretKeyRef" in node:
                refs.add(("Secret", node["secretKeyRef"]["name"]))
            if "configMapRef" in node:
                refs.add(("ConfigMap", node["configMapRef"]["name"]))
            if "secret" in node and isinstance(node["secret"], dict) and "secretName" in node["secret"]:
                refs.add(("Secret", node["secret"]["secretName"]))
            if "persistentVolumeClaim" in node:
                refs.add(("PersistentVolumeClaim", node["persistentVolumeClaim"]["claimName"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Pod"):
            walk(pod_spec(doc))
    return refs


def _dangling(docs: list[Manifest]) -> set[tuple[str, str]]:
    rendered = {(d["kind"], d["metadata"]["name"]) for d in docs}
    return _referenced_objects(docs) - rendered


def test_defaults_need_no_gpu_and_no_pre_created_object() -> None:
    docs = render()
    assert _dangling(docs) == set()
    assert "nvidia.com/gpu" not in json.dumps(docs)
    front = one(docs, "Deployment", "-front")
    assert front["spec"]["replicas"] == 1
    one(docs, "PersistentVolumeClaim", "-data")
    assert not find(docs, "StatefulSet") and not find(docs, "HorizontalPodAutoscaler")


def test_reverse_proof_a_reference_to_a_missing_secret_is_caught() -> None:
    docs = render(
        merged(None, **{"store.backend": "postgresql", "externalPostgres.existingSecret": "made-by-hand"})
    )
    assert ("Secret", "made-by-hand") in _dangling(docs)


def test_bundled_postgresql_is_a_statefulset_with_pgvector_and_a_generated_dsn() -> None:
    docs = render(merged(None, **_PG))
    assert _dangling(docs) == set()
    sts = one(docs, "StatefulSet", "-postgresql")
    container = pod_spec(sts)["containers"][0]
    assert "pgvector" in container["image"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    secret = one(docs, "Secret", "-postgresql")
    assert {"username", "password", "dsn"} <= set(secret["data"])
    front_env = {e["name"]: e for e in pod_spec(one(docs, "Deployment", "-front"))["containers"][0]["env"]}
    ref = front_env["RAGSPINE_STORE_DSN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "dsn"}
    one(docs, "Service", "-postgresql")
    assert not find(docs, "PersistentVolumeClaim", "-data")


def test_generated_database_password_is_not_in_any_plain_object() -> None:
    docs = render(merged(None, **{**_PG, "postgresql.password": "Sup3rSecretPw"}))
    assert "Sup3rSecretPw" not in json.dumps([d for d in docs if d["kind"] != "Secret"])


def test_worker_service_is_headless_and_the_front_balances_over_it() -> None:
    docs = render()
    service = one(docs, "Service", "-worker")
    assert service["spec"]["clusterIP"] == "None"
    env = {
        e["name"]: e.get("value") for e in pod_spec(one(docs, "Deployment", "-front"))["containers"][0]["env"]
    }
    assert env["RAGSPINE_WORKER_ADDRESS"] == "dns:///rel-ragspine-worker.ns.svc:50052"
    plain = render(merged(None, **{"worker.service.headless": False}))
    assert "clusterIP" not in one(plain, "Service", "-worker")["spec"]
    env = {
        e["name"]: e.get("value")
        for e in pod_spec(one(plain, "Deployment", "-front"))["containers"][0]["env"]
    }
    assert env["RAGSPINE_WORKER_ADDRESS"] == "rel-ragspine-worker:50052"


def test_gpu_example_fetches_its_models_before_the_worker_starts() -> None:
    values = example_values("gpu")
    docs = render(values)
    spec = pod_spec(one(docs, "Deployment", "-worker"))
    (init,) = spec["initContainers"]
    assert init["command"][:3] == ["python", "-m", "ragspine.models.fetch"]
    assert init["args"] == [values["settings"]["rerankerModel"], values["settings"]["visualModel"]]
    assert {"name": "models", "mountPath": "/models"} in init["volumeMounts"]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    with_token = render(merged(values, **{"worker.modelFetch.hubTokenSecret": "hub"}))
    init_env = pod_spec(one(with_token, "Deployment", "-worker"))["initContainers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}} in init_env
    assert "initContainers" not in pod_spec(one(render(), "Deployment", "-worker"))


def test_topology_spread_gets_the_role_selector_and_priority_class_is_set() -> None:
    constraint = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
    }
    docs = render(
        merged(
            None,
            **{
                "worker.topologySpreadConstraints": [constraint],
                "worker.priorityClassName": "gpu-high",
                "front.extraVolumes": [{"name": "ca", "configMap": {"name": "ca"}}],
                "front.extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ca"}],
            },
        )
    )
    worker = pod_spec(one(docs, "Deployment", "-worker"))
    (spread,) = worker["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    assert worker["priorityClassName"] == "gpu-high"
    front = pod_spec(one(docs, "Deployment", "-front"))
    assert {"name": "ca", "configMap": {"name": "ca"}} in front["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ca"} in front["containers"][0]["volumeMounts"]


def test_service_monitors_are_opt_in() -> None:
    assert not find(render(), "ServiceMonitor")
    docs = render(
        merged(
            None,
            **{"metrics.serviceMonitor.enabled": True, "metrics.serviceMonitor.labels": {"release": "kp"}},
        )
    )
    monitors = find(docs, "ServiceMonitor")
    assert sorted(m["metadata"]["name"] for m in monitors) == ["rel-ragspine-front", "rel-ragspine-worker"]
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kp"
        assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]


def test_notes_name_the_first_commands() -> None:
    notes = (CHART_DIR / "templates" / "NOTES.txt").read_text()
    assert "kubectl port-forward" in notes and "ragspine query" in notes and "helm test" in notes


# ---- schema enums follow the code ---------------------------------------------------------------------


def test_schema_enumerates_exactly_the_backend_names_the_code_accepts() -> None:
    from ragspine.retrieval.mode import RETRIEVAL_MODE_CHOICES
    from ragspine.retrieval.rerank.cross_encoder import RERANKER_CHOICES
    from ragspine.retrieval.vector.embedding_backends import EMBEDDING_CHOICES
    from ragspine.retrieval.visual.factory import VISUAL_EMBEDDERS

    settings = json.loads((CHART_DIR / "values.schema.json").read_text())["properties"]["settings"][
        "properties"
    ]
    assert sorted(settings["embedding"]["enum"]) == sorted(EMBEDDING_CHOICES)
    assert sorted(settings["reranker"]["enum"]) == sorted(RERANKER_CHOICES)
    assert sorted(settings["retrievalMode"]["enum"]) == sorted(RETRIEVAL_MODE_CHOICES)
    assert settings["visualEmbedder"]["pattern"] == f"^({'|'.join(VISUAL_EMBEDDERS)})(:.+)?$"


# ---- the chart README's values table ------------------------------------------------------------------


def _table_tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "chart_values_table", REPO_ROOT / "scripts" / "chart_values_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_values_table_is_in_sync() -> None:
    assert _table_tool().main(["--check"]) == 0


def test_reverse_proof_a_stale_or_undocumented_table_is_caught(tmp_path: Path) -> None:
    tool = _table_tool()
    chart = tmp_path / "chart"
    shutil.copytree(CHART_DIR, chart)
    values = (chart / "values.yaml").read_text()
    (chart / "values.yaml").write_text(values.replace("  port: 9100", "  port: 9200"))
    assert tool.main(["--check", "--chart", str(chart)]) == 1
    (chart / "values.yaml").write_text(values + "\nbrandNewKey: 1\n")
    assert tool.undocumented((chart / "values.yaml").read_text()) == ["brandNewKey"]
    assert tool.main(["--check", "--chart", str(chart)]) == 1
    (chart / "values.yaml").write_text(values)
    assert tool.main(["--check", "--chart", str(chart)]) == 0


# ---- the HTTP face -------------------------------------------------------------------------------------


def test_the_front_serves_http_beside_grpc() -> None:
    docs = render()
    front = pod_spec(one(docs, "Deployment", "-front"))["containers"][0]
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in front["ports"]
    env = {e["name"]: e.get("value") for e in front["env"]}
    assert env["RAGSPINE_HTTP_PORT"] == "8080"
    ports = {p["name"]: p["port"] for p in one(docs, "Service", "-front")["spec"]["ports"]}
    assert ports["http"] == 8080 and ports["grpc"] == 50051
    assert not find(docs, "Ingress") and not find(docs, "HTTPRoute")
    off = render(merged(None, **{"front.httpPort": 0}))
    assert "http" not in {p["name"] for p in one(off, "Service", "-front")["spec"]["ports"]}


def test_ingress_and_gateway_route_to_the_http_port() -> None:
    values = {
        "ingress.enabled": True,
        "ingress.host": "rag.example.com",
        "ingress.tlsSecretName": "rag-tls",
        "gateway.enabled": True,
        "gateway.parentRefs": [{"name": "public", "namespace": "gateways"}],
    }
    docs = render(merged(None, **values))
    ingress = one(docs, "Ingress", "-front")
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "rag.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "http"}
    assert ingress["spec"]["tls"] == [{"secretName": "rag-tls", "hosts": ["rag.example.com"]}]
    route = one(docs, "HTTPRoute", "-front")
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "rel-ragspine-front", "port": 8080}]


def test_a_gateway_route_without_a_gateway_is_refused() -> None:
    with pytest.raises(helm.HelmValuesError, match="parentRefs"):
        render(merged(None, **{"gateway.enabled": True}))
