"""Device, dtype and onnxruntime-provider selection, in one place for every backend."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragspine.models.packaged import require

logger = logging.getLogger(__name__)

_DEVICES = ("auto", "cpu", "cuda")


def _cuda_available() -> bool:
    torch = require("torch")
    return bool(torch.cuda.is_available())


def select_device(spec: str = "auto") -> str:
    """Resolve a device request to ``"cuda"`` / ``"cuda:N"`` or ``"cpu"``.

    ``"auto"`` picks CUDA when ``torch.cuda.is_available()``, else CPU. Raises ``ValueError`` when CUDA is
    asked for explicitly but this torch build or machine has none, and for unknown names.
    """
    name = (spec or "auto").strip().lower()
    if name not in _DEVICES and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {spec!r}; choose one of auto, cpu, cuda, cuda:N")
    if name == "cpu":
        return "cpu"
    available = _cuda_available()
    if name == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise ValueError(
            f"device {spec!r} was requested but CUDA is not available (CPU-only torch build or no GPU); "
            "use device='cpu' or 'auto'"
        )
    return name


def select_dtype(device: str) -> Any:
    """Inference dtype for ``device``: bfloat16 (or float16) on CUDA; float32 on CPU."""
    torch = require("torch")
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


@dataclass(frozen=True)
class OnnxSession:
    """An onnxruntime session plus the provider it really runs on (``get_providers()[0]``)."""

    session: Any
    provider: str
    threads: int | None


def onnx_providers(device: str = "auto") -> list[str]:
    """Providers to request for ``device``: CUDA first when asked or available, CPU always as the fallback.

    Raises ``ValueError`` when ``device`` is ``"cuda"`` but the installed onnxruntime has no CUDA provider.
    """
    ort = require("onnxruntime")
    name = (device or "auto").strip().lower()
    if name not in _DEVICES and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {device!r}; choose one of auto, cpu, cuda")
    available = set(ort.get_available_providers())
    has_cuda = "CUDAExecutionProvider" in available
    if name.startswith("cuda") and not has_cuda:
        raise ValueError(
            f"device {device!r} was requested but onnxruntime has no CUDAExecutionProvider "
            "(install onnxruntime-gpu instead of onnxruntime)"
        )
    if name == "cpu" or not has_cuda:
        return ["CPUExecutionProvider"]
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def make_onnx_session(
    model_path: str | Path,
    *,
    device: str = "auto",
    threads: int | None = None,
    spin: bool = False,
    lean: bool = True,
    graph: str | bytes | None = None,
) -> OnnxSession:
    """Open an inference session on ``model_path`` and record the provider it actually got.

    ``threads`` sets intra-op threads (None = onnxruntime's default, all cores). ``spin=False`` stops idle
    worker threads from busy-waiting between operators: on a shared or oversubscribed host spinning steals
    the cores that the other threads (and processes) need. ``lean`` (default) runs the graph with its
    repeated attention masks built once and its softmax NaN guards dropped
    (:func:`ragspine.models.onnx_graph.lean_model`: exact, the same outputs bit for bit; ``model_path``
    itself is not changed, a rewritten copy is cached). ``graph``: that rewrite of ``model_path`` found
    earlier (``lean_model``'s path or bytes), to open a second session without looking again. A rewrite
    onnxruntime cannot load falls back to ``model_path`` with a warning. Raises ``ValueError`` when
    the file is missing or not a loadable ONNX model, or CUDA was required and the session fell back to CPU.
    """
    ort = require("onnxruntime")
    path = Path(model_path)
    if not path.is_file():
        raise ValueError(f"ONNX model {str(path)!r} does not exist")
    if threads is not None and threads <= 0:
        raise ValueError(f"threads must be a positive integer or None, got {threads}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    requested = onnx_providers(device)
    source: str | bytes = str(path)
    if graph is not None:
        source = graph
    elif lean:
        from ragspine.models.onnx_graph import lean_model

        source = lean_model(path) or source
    try:
        session = ort.InferenceSession(source, sess_options=options, providers=requested)
    except Exception as exc:  # onnxruntime raises its own exception types for corrupt/unsupported graphs
        if source == str(path):
            raise ValueError(f"ONNX model {str(path)!r} could not be loaded: {exc}") from exc
        logger.warning("lean rewrite of %s could not be loaded (%s); opening the file as it is", path, exc)
        return make_onnx_session(path, device=device, threads=threads, spin=spin, lean=False)
    # A CUDA provider that fails to initialise (driver/library mismatch) silently degrades to CPU:
    # report what the session really runs on, and refuse when CUDA was demanded.
    actual = session.get_providers()[0]
    if device.strip().lower().startswith("cuda") and actual != "CUDAExecutionProvider":
        raise ValueError(f"ONNX session for {str(path)!r} fell back to {actual}; CUDA was required")
    if requested[0] != actual:
        logger.warning("onnxruntime asked for %s but runs on %s", requested[0], actual)
    return OnnxSession(session=session, provider=actual, threads=threads)
