"""What the chart deploys: roles, GPU scheduling, probes, security, secrets and the worker's network fence."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.chart_render import Manifest, example_values, find, merged, one, pod_spec, render


@pytest.fixture(scope="module")
def default_docs() -> list[Manifest]:
    return render()


@pytest.fixture(scope="module")
def gpu_docs() -> list[Manifest]:
    return render(example_values("gpu"))


@pytest.fixture(scope="module")
def cpu_docs() -> list[Manifest]:
    return render(example_values("cpu"))


_PG = {"store.backend": "postgresql", "postgresql.enabled": True, "front.autoscaling.enabled": True}


@pytest.fixture(scope="module")
def pg_docs() -> list[Manifest]:
    return render(merged(None, **_PG))


def _container(doc: Manifest) -> dict[str, Any]:
    containers = pod_spec(doc)["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(doc: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(doc).get("env", [])}


def test_postgresql_release_renders_autoscaling_disruption_budgets_and_network_policy(
    pg_docs: list[Manifest],
) -> None:
    hpa = one(pg_docs, "HorizontalPodAutoscaler", "-front")
    assert hpa["spec"]["scaleTargetRef"]["name"] == one(pg_docs, "Deployment", "-front")["metadata"]["name"]
    assert {p["metadata"]["name"].rsplit("-", 1)[1] for p in find(pg_docs, "PodDisruptionBudget")} == {
        "front",
        "worker",
    }
    one(pg_docs, "NetworkPolicy", "-worker")


def test_one_image_serves_both_roles_by_command(default_docs: list[Manifest]) -> None:
    front = _container(one(default_docs, "Deployment", "-front"))
    worker = _container(one(default_docs, "Deployment", "-worker"))
    assert front["args"][-2:] == ["serve", "front"] and worker["args"][-2:] == ["serve", "worker"]
    assert front["args"][:2] == ["--log-level", "INFO"]
    assert front["ports"][0]["containerPort"] == 50051 and worker["ports"][0]["containerPort"] == 50052


@pytest.mark.parametrize("values", [{"cpuOnly": False}, "gpu"], ids=["cpuOnly=false", "values-gpu"])
def test_gpu_worker_requests_gpus_and_tolerates_gpu_nodes(values: dict[str, Any] | str) -> None:
    docs = render(example_values(values) if isinstance(values, str) else merged(None, **values))
    worker = one(docs, "Deployment", "-worker")
    assert int(_container(worker)["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert any(t["key"] == "nvidia.com/gpu" for t in pod_spec(worker)["tolerations"])
    assert _env(worker)["RAGSPINE_DEVICE"] == "cuda"
    assert "-gpu:" in _container(worker)["image"]


def test_gpu_example_sets_runtime_class_and_node_selector(gpu_docs: list[Manifest]) -> None:
    spec = pod_spec(one(gpu_docs, "Deployment", "-worker"))
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_cpu_only_worker_asks_for_no_gpu_anywhere(cpu_docs: list[Manifest]) -> None:
    worker = one(cpu_docs, "Deployment", "-worker")
    spec = pod_spec(worker)
    assert "nvidia.com/gpu" not in repr(spec)
    assert "runtimeClassName" not in spec and "tolerations" not in spec
    assert _env(worker)["RAGSPINE_DEVICE"] == "cpu"
    assert "-gpu:" not in _container(worker)["image"]


def test_cpu_only_drops_gpu_scheduling_even_when_gpu_values_are_set() -> None:
    values = merged(example_values("gpu"), cpuOnly=True)
    spec = pod_spec(one(render(values), "Deployment", "-worker"))
    assert "nvidia" not in repr(spec)


def test_worker_startup_probe_allows_for_model_loading(default_docs: list[Manifest]) -> None:
    probe = _container(one(default_docs, "Deployment", "-worker"))["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 300


@pytest.mark.parametrize(
    ("suffix", "port", "ready_service"),
    [("-front", 50051, "ragspine.v1.RetrievalService"), ("-worker", 50052, "ragspine.v1.ModelWorkerService")],
)
def test_probes_are_native_grpc_health_checks(
    default_docs: list[Manifest], suffix: str, port: int, ready_service: str
) -> None:
    container = _container(one(default_docs, "Deployment", suffix))
    assert container["livenessProbe"]["grpc"] == {"port": port, "service": ""}
    assert container["readinessProbe"]["grpc"] == {"port": port, "service": ready_service}


def test_probes_fall_back_to_tcp_under_tls() -> None:
    docs = render(merged(None, **{"tls.enabled": True, "tls.secretName": "rag-tls"}))
    container = _container(one(docs, "Deployment", "-front"))
    assert "grpc" not in container["readinessProbe"] and container["readinessProbe"]["tcpSocket"]
    assert _env(one(docs, "Deployment", "-front"))["RAGSPINE_TLS_CERT_FILE"].startswith("/etc/ragspine/tls/")


@pytest.mark.parametrize("values_name", [None, "gpu", "cpu"])
def test_every_pod_runs_non_root_with_no_capabilities(values_name: str | None) -> None:
    docs = render(example_values(values_name) if values_name else None)
    pods = [d for d in docs if d["kind"] in ("Deployment", "Pod")]
    assert len(pods) == 3  # front, worker, helm test
    for doc in pods:
        spec = pod_spec(doc)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["automountServiceAccountToken"] is False
        ctx = _container(doc)["securityContext"]
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
        assert _container(doc)["resources"]["requests"]


def test_store_dsn_comes_from_a_secret_and_never_appears_in_the_pod() -> None:
    dsn = "postgresql://rag:s3cret@db:5432/rag"
    docs = render(merged(None, **{"store.backend": "postgresql", "externalPostgres.dsn": dsn}))
    front = one(docs, "Deployment", "-front")
    ref = _env(front)["RAGSPINE_STORE_DSN"]["secretKeyRef"]
    secret = one(docs, "Secret", ref["name"].removeprefix("rel-ragspine"))
    assert ref["key"] in secret["data"]
    assert "s3cret" not in repr([d for d in docs if d["kind"] != "Secret"])


def test_sqlite_runs_one_front_on_a_claim(cpu_docs: list[Manifest]) -> None:
    front = one(cpu_docs, "Deployment", "-front")
    assert front["spec"]["replicas"] == 1 and front["spec"]["strategy"]["type"] == "Recreate"
    claim = one(cpu_docs, "PersistentVolumeClaim", "-data")
    volumes = {v["name"]: v for v in pod_spec(front)["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert "RAGSPINE_STORE_DSN" not in _env(front)
    assert not find(cpu_docs, "HorizontalPodAutoscaler")


def test_helm_test_hook_checks_health_and_runs_a_retrieve(default_docs: list[Manifest]) -> None:
    pod = one(default_docs, "Pod", "-test-retrieve")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = _container(pod)["command"][-1]
    assert "HealthCheckRequest" in script and ".Retrieve(" in script
    assert _env(pod)["TARGET"].startswith(one(default_docs, "Service", "-front")["metadata"]["name"] + ":")


# ---- the worker's network fence -------------------------------------------------------------------------


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def may_reach_worker_grpc(policy: Manifest, pod_labels: dict[str, str]) -> bool:
    """True when ``policy`` lets a same-namespace pod with ``pod_labels`` open the worker's gRPC port."""
    for rule in policy["spec"].get("ingress", []):
        ports = [p["port"] for p in rule.get("ports", [])]
        if ports and "grpc" not in ports and 50052 not in ports:
            continue
        peers = rule.get("from")
        if not peers or any(
            "podSelector" in p and _labels_match(p["podSelector"], pod_labels) for p in peers
        ):
            return True
    return False


def _pod_labels(doc: Manifest) -> dict[str, str]:
    labels = (
        doc["metadata"]["labels"] if doc["kind"] == "Pod" else doc["spec"]["template"]["metadata"]["labels"]
    )
    return dict(labels)


def _assert_only_front_reaches_worker(docs: list[Manifest], policy: Manifest) -> None:
    worker = one(docs, "Deployment", "-worker")
    assert _labels_match(policy["spec"]["podSelector"], _pod_labels(worker)), (
        "policy does not select the worker"
    )
    assert may_reach_worker_grpc(policy, _pod_labels(one(docs, "Deployment", "-front")))
    for other in (
        _pod_labels(one(docs, "Pod", "-test-retrieve")),
        {"app": "anything-else"},
        _pod_labels(worker),
    ):
        assert not may_reach_worker_grpc(policy, other), f"{other} may reach the worker"


def test_only_the_front_reaches_the_worker(default_docs: list[Manifest]) -> None:
    _assert_only_front_reaches_worker(default_docs, one(default_docs, "NetworkPolicy", "-worker"))


def test_reverse_proof_an_open_policy_is_caught(default_docs: list[Manifest]) -> None:
    policy = one(default_docs, "NetworkPolicy", "-worker")
    opened = {**policy, "spec": {**policy["spec"], "ingress": [{"from": [{"podSelector": {}}]}]}}
    with pytest.raises(AssertionError, match="may reach the worker"):
        _assert_only_front_reaches_worker(default_docs, opened)


def test_external_qdrant_values_reach_the_front(default_docs: list[Manifest]) -> None:
    assert "RAGSPINE_INDEX_BACKEND" not in _env(one(default_docs, "Deployment", "-front"))
    docs = render(
        merged(
            None,
            **{"qdrant.url": "http://qdrant.db.svc:6333", "qdrant.existingSecret": "qdrant-key"},
        )
    )
    env = _env(one(docs, "Deployment", "-front"))
    assert env["RAGSPINE_INDEX_BACKEND"] == "qdrant" and env["RAGSPINE_QDRANT_URL"] == "http://qdrant.db.svc:6333"
    assert env["RAGSPINE_QDRANT_API_KEY"] == {"secretKeyRef": {"name": "qdrant-key", "key": "api-key"}}
    assert "RAGSPINE_QDRANT_URL" not in _env(one(docs, "Deployment", "-worker"))
