#!/usr/bin/env bash
# Create .venv-engine: a second virtualenv in which colpali-engine imports, so that tests/visual_engine can
# prove the encoders' colpali_engine loading path. colpali-engine needs a torchvision that matches torch;
# the CPU torch 2.13 of .venv has none, so this venv takes torch 2.14.1 + torchvision 0.29.1 instead.
# colpali-engine 0.3.18 declares torch<2.14, hence --no-deps and its import-time needs pinned by hand.
# Safe to re-run: an existing .venv-engine whose pins all match is left as it is (a few seconds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV=.venv-engine

# The runtime colpali-engine needs at import and for ColQwen2 / ColPali inference. peft is imported by
# colpali_engine.models; requests by its utilities. Everything is pinned: an open torch range would pull
# a multi-GB CUDA build.
RUNTIME=(
  "torch==2.14.1"
  "torchvision==0.29.1"
  "transformers==5.24.0"
  "tokenizers==0.23.3"
  "safetensors==0.8.0"
  "huggingface-hub==2.4.0"
  "peft==0.20.0"
  "accelerate==1.15.0"
  "requests==2.34.2"
  "numpy==2.4.6"
  "scipy==1.17.1"
  "tqdm==4.70.1"
  "pillow==13.0.0"
  "pypdfium2==5.15.2"
  "pytest==9.2.0"
  "pytest-timeout==2.4.0"
)
# What the packages above pull in, pinned too so that a re-created venv is the same venv (torch pins its
# own CUDA libraries exactly).
LOCKED=(
  "certifi==2026.10.19.post1" "charset-normalizer==3.5.3" "idna==3.20" "urllib3==2.8.0"
  "filelock==4.3.1" "fsspec==2026.9.0" "hf-xet==1.8.0" "Jinja2==3.1.6" "MarkupSafe==3.0.4"
  "mpmath==1.3.0" "networkx==3.6.1" "sympy==1.14.0" "packaging==26.4" "psutil==7.2.2" "PyYAML==6.0.4"
  "regex==2026.11.19" "typing-extensions==4.16.0" "iniconfig==2.3.1" "pluggy==1.7.0" "Pygments==2.21.0"
  "triton==3.8.0" "cuda-bindings==13.5.0" "cuda-pathfinder==1.9.1" "click==8.5.1" "typer==0.29.2"
  "rich==15.0.0" "markdown-it-py==4.3.0" "mdurl==0.1.2" "shellingham==1.5.4" "annotated-doc==0.0.7"
  "httpx2==2.16.2" "httpcore2==2.16.2" "h11==0.16.0" "anyio==4.16.0" "truststore==0.10.5"
  "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"
)
ENGINE="colpali-engine==0.3.18"

fail() {
  echo "engine_env: $1" >&2
  echo "engine_env: fix the cause above, or delete $VENV and re-run 'bash scripts/engine_env.sh'" >&2
  exit 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "engine_env: creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV" || fail "could not create $VENV with $PYTHON (set PYTHON=python3.11)"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# The machine's pip config lists local index folders that only exist for some packages; pip warns once per
# missing folder. Those lines are noise; every other line of pip's stderr is kept.
quiet() { grep -v "is ignored: it is neither" >&2 || true; }

# pip freeze lines look like name==version; every pin present means nothing to install.
installed="$("${PIP[@]}" freeze 2>/dev/null | tr 'A-Z_' 'a-z-' || true)"
missing=0
for pin in "${RUNTIME[@]}" "${LOCKED[@]}" "$ENGINE"; do
  wanted="$(tr 'A-Z_' 'a-z-' <<<"$pin")"
  grep -qxF "$wanted" <<<"$installed" || missing=1
done
# ragspine must be this checkout, installed in editable mode.
"$VENV/bin/python" -c 'import sys, ragspine; sys.exit(not ragspine.__file__.startswith(sys.argv[1]))' "$ROOT" \
  2>/dev/null || missing=1

if [[ $missing -eq 1 ]]; then
  echo "engine_env: installing torch 2.14.1 + torchvision 0.29.1 and the pinned runtime (first run ~2 min)"
  "${PIP[@]}" install --quiet "${RUNTIME[@]}" "${LOCKED[@]}" 2> >(quiet) || fail "pinned runtime install failed"
  echo "engine_env: installing $ENGINE (--no-deps: its pin says torch<2.14, which torchvision here cannot meet)"
  "${PIP[@]}" install --quiet --no-deps "$ENGINE" 2> >(quiet) || fail "$ENGINE install failed"
  # Only the visual extra: [models] pins torch 2.13, which would undo the torch above.
  echo "engine_env: installing ragspine[visual] in editable mode"
  "${PIP[@]}" install --quiet -e ".[visual]" 2> >(quiet) || fail "editable install of ragspine failed"
else
  echo "engine_env: $VENV already has every pin"
fi

"$VENV/bin/python" - <<'EOF' || fail "colpali_engine does not import in .venv-engine"
import colpali_engine.models
import torch
import torchvision

import ragspine.retrieval.visual.encoders as encoders

assert encoders.colpali_engine_available(), "colpali_engine imports but the encoder cannot see it"
print(f"engine_env: ready (torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"colpali_engine {colpali_engine.__version__ if hasattr(colpali_engine, '__version__') else '0.3.18'})")
EOF
