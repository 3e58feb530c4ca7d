#!/usr/bin/env bash
# The test command: set up (idempotent), lint, type-check, deployment checks, then the whole pytest suite
# (slow model tests included). Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check ragspine services tests bench
echo "== mypy"; .venv/bin/mypy && .venv/bin/mypy services bench
if [[ -f .ci/deploy_checks.sh ]]; then echo "== deploy checks"; bash .ci/deploy_checks.sh .venv; fi
echo "== pytest"
exec .venv/bin/python -m pytest -q "$@"
