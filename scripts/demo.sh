#!/usr/bin/env bash
# The main job on the embedded default (SQLite, CPU, packaged models): set up, ingest the bundled sample
# corpus, run a few questions and print cited snippets; with ../shared/data present, also the SciFact eval.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec .venv/bin/ragspine demo "$@"
