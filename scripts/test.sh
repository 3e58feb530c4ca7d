#!/usr/bin/env bash
# The test command: set up (idempotent), lint, type-check, deployment checks, then the whole pytest suite
# (slow model tests included), then tests/visual_engine in a second venv. Extra arguments go to the first
# pytest run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check ragspine services tests bench
echo "== mypy"; .venv/bin/mypy && .venv/bin/mypy bench
if [[ -f .ci/deploy_checks.sh ]]; then echo "== deploy checks"; bash .ci/deploy_checks.sh .venv; fi
echo "== pytest"
# tests/visual_engine needs colpali-engine, which does not import beside .venv's torch: it runs below.
.venv/bin/python -m pytest -q --ignore=tests/visual_engine "$@"
echo "== pytest tests/visual_engine (colpali_engine loading path, in .venv-engine)"
bash scripts/engine_env.sh
exec .venv-engine/bin/python -m pytest -q tests/visual_engine -p no:cacheprovider
