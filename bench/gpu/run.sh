#!/usr/bin/env bash
# GPU throughput of the worker's model families on random full-size models (no internet, no weights).
# Needs python with torch (CUDA build) and transformers. Prints a markdown table; stays under 8 minutes.
#   bench/gpu/run.sh                      # CUDA, bf16/fp16
#   bench/gpu/run.sh --device cpu --tiny  # smoke test of the script on a CPU machine
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
# A hard ceiling so a slow card or a hung kernel cannot overrun the 8-minute slot.
exec timeout --signal=INT 470 "$python" "$here/throughput.py" "$@"
