"""Page-image and query encoders for late-interaction visual retrieval (ColPali, ColQwen2).

The seam is ``VisualEncoder``: pages in, one ``(n_patches, dim)`` array per page; queries in, one
``(n_tokens, dim)`` array per query. Rows are L2-normalised float32 and padding is already removed, so
``maxsim_scores`` can use them directly.

Two loaders sit behind ``ColPaliEncoder`` / ``ColQwen2Encoder``:

- transformers-native (``ColPaliForRetrieval`` / ``ColQwen2ForRetrieval``, ``*-hf`` checkpoints such as
  ``vidore/colqwen2-v1.0-hf``) — runs on the CPU torch wheel with the PIL image processors;
- ``colpali_engine`` (its own checkpoints: a backbone config such as ``qwen2_vl`` / ``paligemma``, or a
  PEFT adapter over one, e.g. ``vidore/colqwen2-v1.0``) — needs that package to import (it needs a
  torchvision matching torch; ``scripts/engine_env.sh`` builds such a venv).

``backend="auto"`` reads the checkpoint's ``config.json`` (through ``adapter_config.json`` to the base
model for an adapter) and picks the loader that owns that format. Reading first matters: handed a config
of another format, either loader builds a full-size randomly initialised model from default settings (GBs
of memory for vectors that mean nothing) instead of failing.

torch / transformers are imported on first use.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "transformers", "colpali_engine")
DEFAULT_BATCH_SIZE = 4


@runtime_checkable
class VisualEncoder(Protocol):
    """Multi-vector encoder of page images and text queries into one shared space.

    ``embed_pages(images)`` takes RGB PIL images and returns one float32 ``(n_patches, dim)`` array each;
    ``embed_queries(texts)`` returns one float32 ``(n_tokens, dim)`` array per query. ``dim`` is the vector
    width; ``name`` identifies the embedding space (stores refuse to mix names). Both raise ``ValueError``
    for an empty batch or an unusable item.
    """

    name: str
    dim: int

    def embed_pages(self, images: Sequence[Any]) -> list[np.ndarray]: ...

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]: ...


def resolve_device(spec: str = "auto") -> str:
    """``auto``/``cpu``/``cuda``/``cuda:N`` → a torch device string (the project-wide helper when present)."""
    try:
        from ragspine.models.device import select_device

        return str(select_device(spec))
    except ImportError:
        pass
    import torch

    name = (spec or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if not name.startswith("cuda"):
        raise ValueError(f"unknown device {spec!r}; choose one of auto, cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} was requested but CUDA is not available; use 'cpu' or 'auto'")
    return name


def _resolve_dtype(dtype: Any, device: str) -> Any:
    import torch

    if dtype is None:
        # bf16 halves GPU memory with no retrieval loss reported for ColPali; CPUs stay in fp32 for speed.
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"unknown torch dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16'")
        return resolved
    return dtype


def colpali_engine_available() -> bool:
    """True when ``colpali_engine`` imports (it needs a torchvision that matches the installed torch)."""
    try:
        import colpali_engine.models  # noqa: F401
    except Exception:  # a broken torchvision raises RuntimeError, not ImportError
        return False
    return True


def _read_checkpoint_json(model_name_or_path: str, filename: str) -> dict[str, Any] | None:
    """``filename`` of a local directory or hub checkpoint as a dict; ``None`` if absent or unreachable."""
    local = Path(model_name_or_path)
    if local.is_dir():
        target = local / filename
        resolved: str | None = str(target) if target.is_file() else None
    else:
        try:
            from transformers.utils import cached_file

            resolved = cached_file(
                model_name_or_path,
                filename,
                _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
            )
        except (OSError, ValueError):  # a malformed id or an unreachable hub: the loader reports it
            return None
    if resolved is None:
        return None
    try:
        loaded = json.loads(Path(resolved).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{filename} of {model_name_or_path!r} is not readable JSON: {exc}") from None
    return loaded if isinstance(loaded, dict) else None


def checkpoint_model_type(model_name_or_path: str | Path) -> tuple[str | None, bool]:
    """``(model_type, is_adapter)`` of a checkpoint, without loading any weights.

    For a PEFT adapter (``adapter_config.json`` and no ``config.json``) the model type is its base model's.
    ``model_type`` is ``None`` when no config can be read (hub unreachable, base model not found). Raises
    ``ValueError`` when a config file exists but is not JSON.
    """
    name = str(model_name_or_path)
    config = _read_checkpoint_json(name, "config.json")
    if config is not None:
        return (str(config["model_type"]) if config.get("model_type") else None), False
    adapter = _read_checkpoint_json(name, "adapter_config.json")
    if adapter is None:
        return None, False
    base = adapter.get("base_model_name_or_path")
    base_config = _read_checkpoint_json(str(base), "config.json") if base else None
    model_type = base_config.get("model_type") if base_config else None
    return (str(model_type) if model_type else None), True


def _classes(module: str, model_class: str, processor_class: str) -> tuple[Any, Any]:
    """``from module import model_class, processor_class`` (``ImportError`` when the installed version
    lacks one)."""
    imported = importlib.import_module(module)
    for name in (model_class, processor_class):
        if not hasattr(imported, name):
            raise ImportError(f"cannot import name {name!r} from {module!r}")
    return getattr(imported, model_class), getattr(imported, processor_class)


class _LateInteractionEncoder:
    """Shared loading and batching; subclasses name the model family and its classes."""

    family = ""
    # config.json model_type of a transformers-native checkpoint and of a colpali_engine one (or its base).
    native_model_type = ""
    engine_model_type = ""
    model_hint = ""
    # The family's class names: ``{stem}ForRetrieval`` / ``{stem}Processor`` in transformers, ``{stem}`` /
    # ``{stem}Processor`` in colpali_engine.models.
    class_stem = ""
    model: Any
    processor: Any

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        device: str = "auto",
        dtype: Any = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backend: str = "auto",
    ) -> None:
        if not str(model_name_or_path).strip():
            raise ValueError(f"{type(self).__name__} needs a model id or a local model directory")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.model_name_or_path = str(model_name_or_path)
        self.device = resolve_device(device)
        self.torch_dtype = _resolve_dtype(dtype, self.device)
        self.batch_size = batch_size
        self.backend = self._load(backend)
        self.model.eval()
        local = Path(self.model_name_or_path)
        label = local.name if local.is_dir() else self.model_name_or_path
        self.name = f"{self.family}:{label}"
        self.dim = int(self._embedding_dim())

    @classmethod
    def from_loaded(
        cls,
        model: Any,
        processor: Any,
        *,
        name: str,
        device: str = "cpu",
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> _LateInteractionEncoder:
        """Wrap a model and processor already in memory (e.g. built from a config for a throughput run).

        ``model`` must already sit on ``device``; its parameter dtype is used for the pixel inputs.
        Raises ``ValueError`` for a non-positive batch size.
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        encoder = cls.__new__(cls)
        encoder.model_name_or_path = name
        encoder.device = device
        encoder.torch_dtype = next(model.parameters()).dtype
        encoder.batch_size = batch_size
        encoder.backend = "in-memory"
        encoder.model = model.eval()
        encoder.processor = processor
        encoder.name = f"{cls.family}:{name}"
        encoder.dim = encoder._embedding_dim()
        return encoder

    # -- loading ---------------------------------------------------------------------------------------
    def _load(self, backend: str) -> str:
        model_type, is_adapter = checkpoint_model_type(self.model_name_or_path)
        fmt = self._checkpoint_format(model_type, is_adapter)
        if backend == "auto":
            if fmt == "colpali_engine":
                self._require_colpali_engine(f"{self.model_name_or_path!r} is a colpali_engine checkpoint")
                self._load_colpali_engine_or_explain()
                return "colpali_engine"
            if fmt == "transformers":
                self._load_transformers_or_explain()
                return "transformers"
            # Unknown format (config unreadable, e.g. an unreachable hub): try transformers, then the engine.
            try:
                self._load_transformers()
                return "transformers"
            except (OSError, ValueError, KeyError, TypeError) as exc:
                if not colpali_engine_available():
                    raise self._transformers_error(exc) from exc
                logger.info("transformers load failed (%s); trying colpali_engine", exc)
            self._load_colpali_engine_or_explain()
            return "colpali_engine"
        if backend == "transformers":
            if fmt == "colpali_engine":
                raise ValueError(
                    f"{self.model_name_or_path!r} is a colpali_engine checkpoint "
                    f"({self._format_detail(model_type, is_adapter)}), which the transformers backend cannot "
                    f"load; use backend 'colpali_engine' or 'auto' (needs colpali-engine: see "
                    f"scripts/engine_env.sh) or the transformers-native checkpoint "
                    f"{self.default_model_hint()}"
                )
            self._load_transformers_or_explain()
            return "transformers"
        self._require_colpali_engine("backend 'colpali_engine' was requested")
        if fmt == "transformers":
            raise ValueError(
                f"{self.model_name_or_path!r} is a transformers-native checkpoint (model_type "
                f"{model_type!r}), which colpali_engine cannot load; use backend 'transformers' or 'auto'"
            )
        self._load_colpali_engine_or_explain()
        return "colpali_engine"

    def _checkpoint_format(self, model_type: str | None, is_adapter: bool) -> str:
        """``transformers`` | ``colpali_engine`` | ``unknown``; ``ValueError`` for another model family."""
        if model_type is None:
            # Adapters are colpali_engine's format even when the base config cannot be read here.
            return "colpali_engine" if is_adapter else "unknown"
        if model_type == self.native_model_type:
            return "transformers"
        if model_type == self.engine_model_type:
            return "colpali_engine"
        raise ValueError(
            f"{self.model_name_or_path!r} has model_type {model_type!r}, not a {self.family} checkpoint; "
            f"expected {self.native_model_type!r} (transformers, e.g. {self.default_model_hint()}) or "
            f"{self.engine_model_type!r} (colpali_engine)"
        )

    @staticmethod
    def _format_detail(model_type: str | None, is_adapter: bool) -> str:
        base = f"model_type {model_type!r}" if model_type else "base model config not readable"
        return f"PEFT adapter, {base}" if is_adapter else base

    def _require_colpali_engine(self, why: str) -> None:
        if not colpali_engine_available():
            raise ValueError(
                f"{why}, but colpali_engine does not import here: install colpali-engine with a torchvision "
                f"that matches torch (scripts/engine_env.sh builds such a venv), or use the "
                f"transformers-native checkpoint {self.default_model_hint()}"
            )

    def _load_transformers_or_explain(self) -> None:
        try:
            self._load_transformers()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise self._transformers_error(exc) from exc

    def _load_colpali_engine_or_explain(self) -> None:
        try:
            self._load_colpali_engine()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"could not load {self.family} model {self.model_name_or_path!r} with colpali_engine "
                f"({type(exc).__name__}: {exc}); an adapter checkpoint needs its base model "
                f"(adapter_config.json: base_model_name_or_path) to be reachable"
            ) from exc

    def _transformers_error(self, exc: Exception) -> ValueError:
        return ValueError(
            f"could not load {self.family} model {self.model_name_or_path!r} with transformers "
            f"({type(exc).__name__}: {exc}); expected a '-hf' checkpoint (e.g. "
            f"{self.default_model_hint()}) or install colpali-engine for adapter checkpoints"
        )

    def _load_transformers(self) -> None:
        stem = self.class_stem
        model_class, processor_class = _classes("transformers", f"{stem}ForRetrieval", f"{stem}Processor")
        self.processor = processor_class.from_pretrained(self.model_name_or_path)
        self.model = model_class.from_pretrained(self.model_name_or_path, dtype=self.torch_dtype)
        self.model.to(self.device)

    def _load_colpali_engine(self) -> None:
        stem = self.class_stem
        model_class, processor_class = _classes("colpali_engine.models", stem, f"{stem}Processor")
        self.processor = processor_class.from_pretrained(self.model_name_or_path)
        self.model = model_class.from_pretrained(
            self.model_name_or_path, dtype=self.torch_dtype, device_map=self.device
        )

    def default_model_hint(self) -> str:
        """The transformers-native checkpoint of this family that error messages point to."""
        return self.model_hint

    def _embedding_dim(self) -> int:
        config = getattr(self.model, "config", None)
        dim = getattr(config, "embedding_dim", None) or getattr(self.model, "dim", None)
        if not dim:
            raise ValueError(f"model {self.model_name_or_path!r} does not declare an embedding_dim")
        return int(dim)

    # -- encoding --------------------------------------------------------------------------------------
    def _forward(self, batch: Any) -> list[np.ndarray]:
        import torch

        inputs = {k: v for k, v in batch.items() if k != "labels"}
        inputs = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.torch_dtype)
        with torch.inference_mode():
            output = self.model(**inputs)
        embeddings = getattr(output, "embeddings", output)  # (batch, seq, dim)
        mask = inputs["attention_mask"].bool()  # (batch, seq)
        # Padding rows are zero vectors; dropping them keeps MaxSim sums over real tokens only.
        return [embeddings[i][mask[i]].float().cpu().numpy() for i in range(embeddings.shape[0])]

    def embed_pages(self, images: Sequence[Any]) -> list[np.ndarray]:
        """Embed page images; one float32 ``(n_patches, dim)`` array per image, in input order.

        Raises ``ValueError`` for an empty list or an item that is not a PIL image.
        """
        if len(images) == 0:
            raise ValueError("embed_pages needs at least one image")
        for i, image in enumerate(images):
            if not hasattr(image, "convert") or not hasattr(image, "size"):
                raise ValueError(f"item {i} is {type(image).__name__}, not a PIL image")
        out: list[np.ndarray] = []
        for start in range(0, len(images), self.batch_size):
            chunk = [image.convert("RGB") for image in images[start : start + self.batch_size]]
            out.extend(self._forward(self.processor.process_images(chunk)))
        return out

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Embed queries: one float32 ``(n_tokens, dim)`` array each (prefix and augmentation tokens kept).

        Raises ``ValueError`` for an empty list or a blank / non-string query.
        """
        if len(texts) == 0:
            raise ValueError("embed_queries needs at least one query")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"query {i} is empty or not a string")
        out: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            out.extend(self._forward(self.processor.process_queries(chunk)))
        return out


class ColQwen2Encoder(_LateInteractionEncoder):
    """ColQwen2 (Qwen2-VL backbone, dynamic resolution, 128-d vectors) from a model id or local directory.

    ``device``: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``; ``dtype``: torch dtype or its name (default
    bf16 on CUDA, fp32 on CPU). Raises ``ValueError`` when the model cannot be loaded.
    """

    family = "colqwen2"
    native_model_type = "colqwen2"
    engine_model_type = "qwen2_vl"
    model_hint = "vidore/colqwen2-v1.0-hf"
    class_stem = "ColQwen2"


class ColPaliEncoder(_LateInteractionEncoder):
    """ColPali (PaliGemma backbone, 448 px, 1,024 patches + prompt tokens, 128-d vectors).

    Same arguments and failure modes as ``ColQwen2Encoder``.
    """

    family = "colpali"
    native_model_type = "colpali"
    engine_model_type = "paligemma"
    model_hint = "vidore/colpali-v1.3-hf"
    class_stem = "ColPali"
