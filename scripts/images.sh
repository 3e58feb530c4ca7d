#!/usr/bin/env bash
# Build (and with --push, publish) both RAGSpine images with docker buildx, each with an SBOM and a
# provenance attestation:
#   REGISTRY/ragspine:TAG      Dockerfile      CPU: the front tier (and a CPU worker), linux/amd64 + linux/arm64
#   REGISTRY/ragspine-gpu:TAG  Dockerfile.gpu  CUDA: the model worker, linux/amd64 (CUDA wheels are amd64-only)
#
# Usage: scripts/images.sh [--push] [--tag TAG] [--registry REGISTRY] [--prefetch "ID ID ..."]
#   TAG defaults to the version in pyproject.toml; REGISTRY to ghcr.io/ragspine (the chart's default).
#   --prefetch bakes model weights into the GPU image (Dockerfile.gpu PREFETCH_MODELS); a hub token for
#   gated models is read from $HF_TOKEN as a build secret, never stored in a layer.
# Without --push the images are built for the local platform only and loaded into the local engine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

push=0
tag="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
registry="ghcr.io/ragspine"
prefetch=""
while (($#)); do
  case "$1" in
    --push) push=1 ;;
    --tag) tag="$2"; shift ;;
    --registry) registry="$2"; shift ;;
    --prefetch) prefetch="$2"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "images: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
command -v docker >/dev/null || { echo "images: docker (with buildx) is required" >&2; exit 1; }
docker buildx version >/dev/null || { echo "images: docker buildx is required" >&2; exit 1; }

common=(--sbom=true --provenance=mode=max --label "org.opencontainers.image.version=$tag")
if ((push)); then
  output=(--push)
  cpu_platforms="linux/amd64,linux/arm64"
else
  output=(--load)
  cpu_platforms="linux/$(docker version --format '{{.Server.Arch}}')"
  # An SBOM attestation cannot be loaded into the local image store; keep it for pushed builds.
  common=(--label "org.opencontainers.image.version=$tag")
fi
secret=()
if [[ -n "${HF_TOKEN:-}" ]]; then
  secret=(--secret id=hf_token,env=HF_TOKEN)
fi

echo "images: $registry/ragspine:$tag ($cpu_platforms)"
docker buildx build -f Dockerfile --platform "$cpu_platforms" "${common[@]}" "${output[@]}" \
  -t "$registry/ragspine:$tag" .
echo "images: $registry/ragspine-gpu:$tag (linux/amd64${prefetch:+, models: $prefetch})"
docker buildx build -f Dockerfile.gpu --platform linux/amd64 "${common[@]}" "${output[@]}" "${secret[@]}" \
  --build-arg "PREFETCH_MODELS=$prefetch" -t "$registry/ragspine-gpu:$tag" .
echo "images: done"
