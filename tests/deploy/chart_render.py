"""Offline render of the Helm chart for the deploy tests (Helm SDK, no cluster, no helm binary)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

helm = pytest.importorskip("helm_python", reason="the [deploy] extra (helm-python-sdk) is not installed")
yaml = pytest.importorskip("yaml")

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "ragspine"
RELEASE = "rel"

Manifest = dict[str, Any]


def example_values(name: str) -> dict[str, Any]:
    """The chart's example values file ``values-<name>.yaml`` as a dict."""
    loaded = yaml.safe_load((CHART_DIR / f"values-{name}.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def merged(base: dict[str, Any] | None, **paths: Any) -> dict[str, Any]:
    """A copy of ``base`` with dotted keys set, e.g. ``merged(v, **{"front.replicas": 3})``."""
    out = copy.deepcopy(base or {})
    for dotted, value in paths.items():
        node = out
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


def render(values: dict[str, Any] | None = None, chart_dir: Path = CHART_DIR) -> list[Manifest]:
    """Every Kubernetes object the chart renders for ``values`` (templates that render nothing skipped)."""
    chart = helm.Chart.load(str(chart_dir))
    rendered = chart.render(values, name=RELEASE, namespace="ns", is_install=True)
    docs: list[Manifest] = []
    for template, text in sorted(rendered.items()):
        if template.endswith(".yaml"):
            docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def find(docs: list[Manifest], kind: str, suffix: str = "") -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]


def one(docs: list[Manifest], kind: str, suffix: str) -> Manifest:
    matches = find(docs, kind, suffix)
    assert len(matches) == 1, f"expected one {kind} *{suffix}, got {[m['metadata']['name'] for m in matches]}"
    return matches[0]


def pod_spec(doc: Manifest) -> dict[str, Any]:
    return doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]


def copy_chart(tmp_path: Path) -> Path:
    """A writable copy of the chart, for reverse proofs that break one piece of it."""
    target = tmp_path / "ragspine"
    shutil.copytree(CHART_DIR, target)
    return target
