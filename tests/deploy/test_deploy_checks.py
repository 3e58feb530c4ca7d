"""The CI deploy checks as tests: .ci/deploy_checks.sh passes on the tree and fails loudly on breakage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.chart_render import REPO_ROOT

pytest.importorskip("helm_python", reason="the [deploy] extra (helm-python-sdk) is not installed")

SCRIPT = REPO_ROOT / ".ci" / "deploy_checks.sh"
VENV = Path(sys.prefix)


def _run_checks(
    root: Path, *, checkov: bool = False, kube: str = "1.30.0"
) -> subprocess.CompletedProcess[str]:
    """Run the checks; the breakage tests leave out what they do not break (checkov, extra versions)."""
    env = {
        **os.environ,
        "CHECKOV": "1" if checkov else "0",
        "CHECKOV_VENV": str(REPO_ROOT / ".venv-checkov"),
        "KUBE_VERSIONS": kube,
    }
    return subprocess.run(
        ["bash", str(root / ".ci" / "deploy_checks.sh"), str(VENV)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def _tree_copy(tmp_path: Path) -> Path:
    """The parts of the repository the checks read, copied so one of them can be broken."""
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    shutil.copy2(SCRIPT, root / ".ci")
    shutil.copy2(REPO_ROOT / ".ci" / "checkov-skips.txt", root / ".ci")
    shutil.copytree(REPO_ROOT / "scripts", root / "scripts")
    shutil.copytree(REPO_ROOT / "helm", root / "helm")
    for name in ("Dockerfile", "Dockerfile.gpu"):
        shutil.copy2(REPO_ROOT / name, root / name)
    return root


def test_deploy_checks_pass_on_the_tree() -> None:
    versions = ("1.29.0", "1.30.0", "1.31.0")
    done = _run_checks(REPO_ROOT, checkov=True, kube=" ".join(versions))
    assert done.returncode == 0, done.stdout + done.stderr
    for label in ("default", "gpu", "cpu", "postgresql"):
        assert f"ok   helm lint --strict + render [{label}]" in done.stdout
        for version in versions:
            assert f"ok   kubernetes-validate --strict -k {version} [{label}]" in done.stdout
    assert "ok   checkov kubernetes [every value set]" in done.stdout
    assert "ok   hadolint Dockerfile.gpu" in done.stdout
    assert "ok   chart README values table" in done.stdout


def test_deploy_checks_fail_on_a_privileged_container(tmp_path: Path) -> None:
    """Reverse proof of the policy lint: a privileged worker passes lint and schema, and checkov stops it."""
    root = _tree_copy(tmp_path)
    values = root / "helm" / "ragspine" / "values.yaml"
    values.write_text(
        values.read_text().replace(
            "  allowPrivilegeEscalation: false", "  privileged: true\n  allowPrivilegeEscalation: false"
        )
    )
    schema = root / "helm" / "ragspine" / "values.schema.json"
    schema.unlink()  # the schema would refuse it first; the policy lint must stand on its own
    done = _run_checks(root, checkov=True)
    assert done.returncode == 1
    assert "FAIL checkov kubernetes" in done.stdout and "CKV_K8S_16" in done.stdout


def test_deploy_checks_fail_on_a_manifest_kubernetes_rejects(tmp_path: Path) -> None:
    root = _tree_copy(tmp_path)
    service = root / "helm" / "ragspine" / "templates" / "worker-service.yaml"
    # A misspelt field renders and lints fine; only the strict schema validation catches it.
    service.write_text(
        service.read_text().replace(
            "  type: ClusterIP\n", "  type: ClusterIP\n  clusterIPs: none\n  tpye: x\n"
        )
    )
    done = _run_checks(root)
    assert done.returncode == 1
    assert "FAIL kubernetes-validate --strict -k 1.30.0 [default]" in done.stdout
    assert "check(s) failed" in done.stdout


def test_deploy_checks_fail_on_a_template_that_does_not_render(tmp_path: Path) -> None:
    root = _tree_copy(tmp_path)
    hpa = root / "helm" / "ragspine" / "templates" / "front-hpa.yaml"
    hpa.write_text(
        hpa.read_text().replace(".Values.front.autoscaling.maxReplicas", ".Values.front.autoscaling.max.x")
    )
    done = _run_checks(root)
    assert done.returncode == 1
    # The HPA renders only where autoscaling is on: the bundled-PostgreSQL set.
    assert "FAIL helm" in done.stdout and "[postgresql]" in done.stdout


def test_deploy_checks_fail_on_a_dockerfile_lint_error(tmp_path: Path) -> None:
    root = _tree_copy(tmp_path)
    (root / "Dockerfile").write_text("FROM python:latest\nRUN pip install grpcio\n")
    done = _run_checks(root)
    assert done.returncode == 1
    assert "FAIL hadolint Dockerfile" in done.stdout and "ok   hadolint Dockerfile.gpu" in done.stdout


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_images_run_as_a_non_root_user(dockerfile: str) -> None:
    lines = (REPO_ROOT / dockerfile).read_text().splitlines()
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_stage = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    assert any(line.startswith("USER ") for line in lines[last_stage:]), "the runtime stage must switch user"


def test_gpu_image_never_holds_onnxruntime_beside_onnxruntime_gpu() -> None:
    text = (REPO_ROOT / "Dockerfile.gpu").read_text()
    remove = text.index("pip uninstall -y onnxruntime")
    add = text.index("pip install onnxruntime-gpu")
    assert remove < add, "the CPU onnxruntime must be uninstalled before onnxruntime-gpu goes in"
    assert "CUDAExecutionProvider" in text[add:]
    # Nothing installed after it in the build stage may bring the CPU build back.
    rest_of_build = text[add + len("pip install onnxruntime-gpu") :].split("\nFROM ")[0]
    assert "pip install" not in rest_of_build
