"""Fill a model cache with the weights a worker will load: ``python -m ragspine.models.fetch ID [ID ...]``.

Run before the worker starts (the Helm chart's ``fetch-models`` init container) or at image build time
(to bake weights into an image for clusters with no egress). Each id is a Hugging Face repository id; a
local directory is accepted and skipped (nothing to fetch). Weights land in ``--cache-dir`` (default
``$HF_HOME``), in the hub's own cache layout, which is where transformers, sentence-transformers and
colpali-engine look when they later load the same id offline. A token for gated or private repositories
comes from ``HF_TOKEN``. Ids already complete in the cache are not downloaded again.

Exit status: 0 when every id is in the cache afterwards, 1 when any failed (each failure is printed on
one line with what to do), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# Files the loaders never read: skipping them keeps the cache (and an image) smaller.
_IGNORE = ["*.msgpack", "*.h5", "*.ot", "*.tflite", "flax_model*", "tf_model*", "rust_model*", "*.onnx_data"]


def check_model_id(model_id: str) -> str:
    """``model_id`` or ``ValueError`` saying what a repository id looks like."""
    if not _REPO_ID.match(model_id) or ".." in model_id:
        raise ValueError(f"model id {model_id!r} is not a repository id like 'org/name' or a local directory")
    return model_id


def fetch_models(
    model_ids: Sequence[str],
    *,
    cache_dir: str | Path | None = None,
    token: str | None = None,
    download: Callable[..., Any] | None = None,
    log: Callable[[str], None] = print,
) -> list[str]:
    """Download every id of ``model_ids`` into ``cache_dir``; returns the ids that failed (empty = all
    present). ``download`` defaults to ``huggingface_hub.snapshot_download``."""
    if download is None:
        try:
            from huggingface_hub import snapshot_download
        except ModuleNotFoundError:
            raise ValueError(
                "huggingface_hub is not installed: pip install 'ragspine[models]' (transformers brings it)"
            ) from None
        download = snapshot_download
    failed: list[str] = []
    for raw in model_ids:
        model_id = raw.strip()
        if not model_id:
            continue
        if Path(model_id).is_dir():
            log(f"fetch: {model_id} is a local directory; nothing to fetch")
            continue
        try:
            check_model_id(model_id)
        except ValueError as exc:
            log(f"fetch: FAILED {exc}")
            failed.append(model_id)
            continue
        started = time.monotonic()
        log(f"fetch: {model_id} ...")
        try:
            path = download(
                repo_id=model_id,
                cache_dir=None if cache_dir is None else str(Path(cache_dir) / "hub"),
                token=token,
                ignore_patterns=_IGNORE,
            )
        except Exception as exc:  # network, auth, unknown repo: report and go on with the others
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log(
                f"fetch: FAILED {model_id}: {reason} (check the id, network egress to the hub, and HF_TOKEN "
                "for gated models; or bake the weights into the image)"
            )
            failed.append(model_id)
            continue
        log(f"fetch: {model_id} ready in {path} ({time.monotonic() - started:.1f} s)")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ragspine.models.fetch", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("model_ids", nargs="+", metavar="ID", help="Hugging Face repository ids")
    parser.add_argument("--cache-dir", default=None, help="cache root (default: $HF_HOME)")
    args = parser.parse_args(argv)
    failed = fetch_models(
        args.model_ids,
        cache_dir=args.cache_dir or os.environ.get("HF_HOME") or None,
        token=os.environ.get("HF_TOKEN") or None,
    )
    if failed:
        print(
            f"fetch: {len(failed)} of {len(args.model_ids)} model(s) failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
