#!/usr/bin/env bash
# Visual page retrieval throughput on a GPU machine: randomly initialised full-size ColQwen2-2B and
# ColPali-3B (no internet, no weights needed), page embedding pages/s, query latency, MaxSim over
# 100k and 1M pages, GPU memory per 100k pages. Stops itself before 8 minutes.
#   bash bench/gpu/visual.sh                        # on the GPU machine
#   bash bench/gpu/visual.sh --device cpu --tiny    # smoke test anywhere
# Needs: a CUDA torch build, transformers>=5, pillow, numpy, scipy (pip install -e '.[models,visual]').
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec timeout --signal=INT 470 "$PY" bench/gpu/visual_gpu.py "$@"
