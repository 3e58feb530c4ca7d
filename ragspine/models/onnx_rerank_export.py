"""The rerankers' ONNX runtime: which runtime to use, one-time exports, optional int8 quantisation.

Files land in ``<cache>/onnx/`` named by the checkpoint's folder, a content tag of its weights and the graph
kind, so an upgraded checkpoint re-exports and a cached graph is reused without loading torch weights.
Every file is written beside its target and renamed into place: a crash never leaves a half-written graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragspine.models.colbert_weights import load_projection
from ragspine.models.onnx_export import _export_traced, _load_for_export, _tag
from ragspine.models.onnx_graph import atomic_target
from ragspine.models.packaged import cache_dir, require

CROSS_ENCODER_OUTPUT = "relevance"
COLBERT_OUTPUT = "token_vectors"
RUNTIMES = ("auto", "torch", "onnx")


def select_runtime(runtime: str, device: str, *, int8: bool = False, dtype: Any = None) -> str:
    """Resolve a runtime request for a reranker running on ``device`` (already resolved) to torch or onnx.

    ``"auto"``: onnx on CPU when onnxruntime imports, torch on CUDA or when a non-float32 ``dtype`` was
    asked for (the exported graphs are float32). ``"onnx"``: raises ``ImportError`` naming the extra when
    onnxruntime does not import. Raises ``ValueError`` for an unknown name, for ``int8=True`` on the torch
    runtime (int8 exists only as an ONNX graph) and for a non-float32 ``dtype`` on the onnx runtime.
    """
    name = (runtime or "").strip().lower()
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    torch = require("torch")
    wants_other_dtype = dtype is not None and dtype != torch.float32
    if name == "auto":
        if device.startswith("cuda") or wants_other_dtype:
            name = "torch"
        else:
            try:
                require("onnxruntime")
                name = "onnx"
            except ImportError:
                name = "torch"
    elif name == "onnx":
        require("onnxruntime")
        if wants_other_dtype:
            raise ValueError(f"runtime='onnx' runs float32 graphs; dtype {dtype} needs runtime='torch'")
    if int8 and name == "torch":
        raise ValueError(
            f"int8=True needs the onnx runtime, but runtime {runtime!r} on device {device!r} resolves to "
            "torch; pass runtime='onnx' on a CPU device or drop int8"
        )
    return name


def onnx_threads() -> int:
    """Intra-op threads for a reranker session: torch's setting, so one knob (``torch.set_num_threads``,
    ``OMP_NUM_THREADS``) bounds both runtimes the same way."""
    return max(1, int(require("torch").get_num_threads()))


def rerank_onnx_path(model_dir: Path, kind: str, *, int8: bool = False) -> Path:
    """Cache location of the ``kind`` graph ("cross-encoder" or "colbert") exported from ``model_dir``.

    Hub snapshots are folders named by a commit hash, so the parent folder (the repository) is part of
    the name too.
    """
    precision = "int8" if int8 else "fp32"
    name = f"{model_dir.parent.name}-{model_dir.name}-{_tag(model_dir)}-{kind}-{precision}.onnx"
    return cache_dir() / "onnx" / name


def export_cross_encoder(model_dir: Path, out_file: Path | None = None) -> Path:
    """Export a sequence-classification checkpoint to fp32 ONNX; reuse the file when it is already there.

    Graph: ``input_ids``, ``attention_mask``, ``token_type_ids`` (batch, sequence) int64 ->
    ``relevance`` (batch,) float32, the logit of the last label (the only one of a ``num_labels=1`` head,
    the "relevant" class otherwise), exactly what ``CrossEncoderReranker`` returns on torch.
    Raises ``ValueError`` naming the folder when the checkpoint cannot be loaded.
    """
    target = out_file or rerank_onnx_path(model_dir, "cross-encoder")
    if target.is_file():
        return target
    torch = require("torch")
    model = _load_for_export(
        model_dir, "AutoModelForSequenceClassification", "sequence classifier", dtype=torch.float32
    )
    # logits (batch, num_labels) -> the last label's (batch,)
    return _export_traced(
        model, lambda out, _mask: out.logits[:, -1], target, CROSS_ENCODER_OUTPUT, {0: "batch"}
    )


def export_colbert(model_dir: Path, out_file: Path | None = None) -> Path:
    """Export a ColBERT checkpoint (encoder + ``linear.weight`` head) to fp32 ONNX; reuse a cached file.

    Graph: the three BERT inputs (batch, sequence) int64 -> ``token_vectors`` (batch, sequence, dim)
    float32, projected by the checkpoint's head and L2-normalised per token; padded positions are still
    present (the caller strips them before MaxSim). Raises ``ValueError`` when the folder holds no
    projection (not a ColBERT checkpoint), when the encoder cannot be loaded, or when the head does not fit
    the encoder's width.
    """
    target = out_file or rerank_onnx_path(model_dir, "colbert")
    if target.is_file():
        return target
    torch = require("torch")
    projection = torch.from_numpy(load_projection(model_dir))  # (dim, hidden)
    encoder = _load_for_export(model_dir, "AutoModel", "encoder", dtype=torch.float32)
    hidden_size = int(encoder.config.hidden_size)
    if projection.shape[1] != hidden_size:
        raise ValueError(
            f"{str(model_dir)!r}: projection expects {projection.shape[1]}-d input "
            f"but the encoder is {hidden_size}-d"
        )
    head = torch.nn.Linear(projection.shape[1], projection.shape[0], bias=False)
    head.weight.data.copy_(projection)

    def token_vectors(out: Any, _mask: Any) -> Any:
        return torch.nn.functional.normalize(head(out.last_hidden_state), dim=-1)  # (batch, seq, dim)

    return _export_traced(
        encoder, token_vectors, target, COLBERT_OUTPUT, {0: "batch", 1: "sequence"}, head=head
    )


def quantize_int8(fp32_file: Path, out_file: Path | None = None) -> Path:
    """Dynamic int8 quantisation of an exported graph (weights int8 per channel, activations at run time).

    Default target: the same name with ``-int8`` in place of ``-fp32``; reused when present. Scores move
    by the quantisation error, which only real weights can measure, so callers opt in. Raises
    ``ValueError`` when ``fp32_file`` is missing or cannot be quantised.
    """
    if not fp32_file.is_file():
        raise ValueError(f"ONNX model {str(fp32_file)!r} does not exist; export it before quantising")
    target = out_file or fp32_file.with_name(fp32_file.name.replace("-fp32.onnx", "-int8.onnx"))
    if target == fp32_file:
        target = fp32_file.with_name(f"{fp32_file.stem}-int8.onnx")
    if target.is_file():
        return target
    quantization = require("onnxruntime.quantization")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_target(target, suffix=".onnx") as tmp:
            quantization.quantize_dynamic(
                str(fp32_file), tmp, weight_type=quantization.QuantType.QInt8, per_channel=True
            )
    except Exception as exc:  # onnx/onnxruntime raise their own types for graphs they cannot rewrite
        raise ValueError(f"cannot quantise {str(fp32_file)!r} to int8: {exc}") from exc
    return target
