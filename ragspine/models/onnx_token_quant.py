"""Integer matrix products for an fp32 ONNX encoder, with activations scaled per token.

``quantise_per_token`` rewrites every ``MatMul`` whose right-hand side is a constant 2-D weight:

- the weight becomes int8 with one symmetric scale per output column (computed here, once);
- its input ``x`` (``[..., K]``) is quantised at run time with one symmetric scale per row, i.e. per
  token: ``s = max(|x_row|) / 127``, ``x_q = round(x / s) + 128`` as uint8 (``QuantizeLinear`` along
  axis 0 of the flattened ``[M, K]`` view);
- the product runs as ``MatMulIntegerToFloat`` (onnxruntime's CPU contrib op: int32 accumulation, then the
  weight scales) and is multiplied by the row scales.

A token's scale depends on that token alone, so a text's vector is the same whatever batch it is embedded
in (onnxruntime's ``quantize_dynamic`` scales a whole batch with one number, so one long text moves the
vectors of the others). An input shared by several products (query, key and value) is quantised once.

``simplify_attention_masks`` (``ragspine.models.onnx_graph``) runs first; it is exact: the attention mask
is built once and the softmax NaN guards are dropped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.onnx_graph import atomic_target, simplify_attention_masks
from ragspine.models.packaged import require

logger = logging.getLogger(__name__)

__all__ = ["quantise_per_token", "simplify_attention_masks"]

_EPS = 1e-8  # smallest row maximum: an all-zero row gets scale eps / 127 instead of dividing by zero


def _quantise_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weight, float32 scale per output column): symmetric, ``round(w / s)``, ``s = max|w| / 127``."""
    scale = np.maximum(np.abs(weight).max(axis=0), 1e-12) / 127.0
    quantised = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
    return quantised, scale.astype(np.float32)


# Operators a weight may be computed with from constants (an int8-stored weight: Cast, then Mul by its scale).
_WEIGHT_OPS = frozenset(
    {"Cast", "Mul", "Div", "Add", "Sub", "DequantizeLinear", "Reshape", "Transpose", "Identity"}
)


class _Constants:
    """Values of tensors computed from initializers and ``Constant`` nodes alone (through ``_WEIGHT_OPS``),
    evaluated on demand with onnx's reference evaluator and memoised."""

    def __init__(self, graph: Any) -> None:
        onnx = require("onnx")
        self._to_array = onnx.numpy_helper.to_array
        self._reference = require("onnx.reference").ReferenceEvaluator
        self._producer = {out: node for node in graph.node for out in node.output}
        self._values: dict[str, np.ndarray | None] = {
            init.name: self._to_array(init) for init in graph.initializer
        }

    def get(self, name: str) -> np.ndarray | None:
        if name not in self._values:
            self._values[name] = None  # a cycle guard while this name is being evaluated
            self._values[name] = self._evaluate(name)
        return self._values[name]

    def _evaluate(self, name: str) -> np.ndarray | None:
        node = self._producer.get(name)
        if node is None:
            return None
        if node.op_type == "Constant":
            attr = node.attribute[0] if len(node.attribute) == 1 else None
            return self._to_array(attr.t) if attr is not None and attr.name == "value" else None
        if node.op_type not in _WEIGHT_OPS or node.domain not in ("", "ai.onnx"):
            return None
        inputs = [self.get(i) if i else None for i in node.input]
        if any(value is None for i, value in zip(node.input, inputs, strict=True) if i):
            return None
        feeds = {i: value for i, value in zip(node.input, inputs, strict=True) if i}
        outputs = self._reference(node).run(None, feeds)
        return np.asarray(outputs[list(node.output).index(name)])


def _drop_unread(graph: Any) -> None:
    """Remove nodes none of whose outputs is read (by a node or as a graph output), and unread
    initializers, until none is left."""
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        kept = [node for node in graph.node if any(out in read for out in node.output)]
        if len(kept) == len(graph.node):
            break
        graph.ClearField("node")
        graph.node.extend(kept)
    used = [init for init in graph.initializer if init.name in read]
    if len(used) != len(graph.initializer):
        graph.ClearField("initializer")
        graph.initializer.extend(used)


def _rewrite(model: Any) -> int:
    """Per-token activation, per-column weight int8 products in place; the number of products rewritten."""
    onnx = require("onnx")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    graph = model.graph
    constants = _Constants(graph)
    added: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        added.append(numpy_helper.from_array(value, name))
        return name

    constant("tq/eps", np.array(_EPS, dtype=np.float32))
    constant("tq/inv127", np.array(1.0 / 127.0, dtype=np.float32))
    constant("tq/one", np.array(1.0, dtype=np.float32))
    constant("tq/zp", np.array(128, dtype=np.uint8))
    constant("tq/axis1", np.array([1], dtype=np.int64))
    constant("tq/start", np.array([0], dtype=np.int64))
    constant("tq/end", np.array([-1], dtype=np.int64))
    nodes: list[Any] = []
    quantised: dict[str, str] = {}  # activation -> prefix of its quantised tensors
    rewritten = 0
    for node in graph.node:
        weight = constants.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if (
            weight is None
            or weight.ndim != 2
            or weight.dtype.kind != "f"
            or constants.get(node.input[0]) is not None
        ):
            nodes.append(node)
            continue
        x = node.input[0]
        w = weight.astype(np.float32)
        k, n = w.shape
        w_q, w_scale = _quantise_weight(w)
        p = f"tq/mm{rewritten}/"
        rewritten += 1
        constant(p + "w", w_q)
        constant(p + "w_scale", w_scale)
        constant(p + "n", np.array([n], dtype=np.int64))
        q = quantised.get(x)
        if q is None:
            q = f"tq/x{len(quantised)}/"
            quantised[x] = q
            constant(q + "k", np.array([-1, k], dtype=np.int64))
            nodes += [
                helper.make_node("Shape", [x], [q + "shape"]),
                helper.make_node("Slice", [q + "shape", "tq/start", "tq/end"], [q + "lead"]),
                helper.make_node("Reshape", [x, q + "k"], [q + "rows"]),
                helper.make_node("ReduceMax", [q + "rows"], [q + "hi"], axes=[1], keepdims=0),
                helper.make_node("ReduceMin", [q + "rows"], [q + "lo"], axes=[1], keepdims=0),
                helper.make_node("Neg", [q + "lo"], [q + "neg_lo"]),
                helper.make_node("Max", [q + "hi", q + "neg_lo", "tq/eps"], [q + "absmax"]),
                helper.make_node("Mul", [q + "absmax", "tq/inv127"], [q + "scale"]),
                helper.make_node("Shape", [q + "scale"], [q + "n_rows"]),
                helper.make_node(
                    "ConstantOfShape",
                    [q + "n_rows"],
                    [q + "zero_points"],
                    value=numpy_helper.from_array(np.array([128], dtype=np.uint8)),
                ),
                helper.make_node(
                    "QuantizeLinear", [q + "rows", q + "scale", q + "zero_points"], [q + "q"], axis=0
                ),
                helper.make_node("Unsqueeze", [q + "scale", "tq/axis1"], [q + "row_scale"]),
            ]
        nodes += [
            helper.make_node(
                "MatMulIntegerToFloat",
                [q + "q", p + "w", "tq/one", p + "w_scale", "tq/zp"],
                [p + "y"],
                domain="com.microsoft",
            ),
            helper.make_node("Mul", [p + "y", q + "row_scale"], [p + "scaled"]),
            helper.make_node("Concat", [q + "lead", p + "n"], [p + "out_shape"], axis=0),
            helper.make_node("Reshape", [p + "scaled", p + "out_shape"], [node.output[0]]),
        ]
    if not rewritten:
        return 0
    graph.ClearField("node")
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    _drop_unread(graph)  # the fp32 weights and whatever computed them
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return rewritten


def quantise_per_token(fp32_file: Path, out_file: Path) -> Path:
    """Write ``out_file``: ``fp32_file`` with attention masks simplified and integer matrix products whose
    activations are scaled per token (see the module docstring). Written to a temporary file and renamed,
    so an interrupted run leaves nothing that later loads. Raises ``ValueError`` when the input is missing,
    is not a readable graph, or has no constant-weight ``MatMul`` to rewrite.
    """
    onnx = require("onnx")
    if not fp32_file.is_file():
        raise ValueError(f"ONNX model {str(fp32_file)!r} does not exist; nothing to quantise")
    try:
        model = onnx.load(str(fp32_file))
    except Exception as exc:  # onnx raises its own types for unreadable files
        raise ValueError(f"ONNX model {str(fp32_file)!r} could not be read: {exc}") from exc
    opset = max((op.version for op in model.opset_import if op.domain in ("", "ai.onnx")), default=0)
    if not 13 <= opset <= 17:
        # ReduceMax/ReduceMin take ``axes`` as an attribute up to opset 17; per-axis QuantizeLinear needs 13.
        raise ValueError(
            f"ONNX model {str(fp32_file)!r} has opset {opset}; per-token quantisation needs 13-17"
        )
    masks = simplify_attention_masks(model.graph)
    rewritten = _rewrite(model)
    if not rewritten:
        raise ValueError(
            f"ONNX model {str(fp32_file)!r} has no MatMul with a constant 2-D weight to quantise"
        )
    with atomic_target(out_file, suffix=".onnx") as tmp:
        onnx.save(model, tmp)
    logger.info("quantised %s per token (%d products, %d mask nodes removed)", out_file, rewritten, masks)
    return out_file
