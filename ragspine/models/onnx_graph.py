"""Exact rewrites of exported encoder graphs: the same outputs, bit for bit, in fewer operations.

Exports of Hugging Face encoders build the same additive attention mask (``Where(mask, 0, -inf)``) in
every layer and, after each softmax, replace NaN by 0 (``Where(IsNaN(p), 0, p)``). Only a softmax row with
every key masked can be NaN, and a tokenised text always attends to its own ``[CLS]`` token, so no such
row exists: ``simplify_attention_masks`` builds each mask once and drops the guards. On the packaged
all-MiniLM-L6-v2 graph the guards take about a fifth of the run time.

``lean_graph`` applies it to a model file: the rewritten graph's bytes, or None when there is nothing to
rewrite or the file cannot be rewritten in memory. ``lean_model`` is what
``ragspine.models.device.make_onnx_session`` opens: the rewrite cached beside the ONNX exports (keyed by
the source file's path, size and modification time), so only the first start pays for loading onnx.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.packaged import cache_dir, require

logger = logging.getLogger(__name__)

__all__ = ["atomic_target", "lean_graph", "lean_model", "simplify_attention_masks", "write_atomic"]

_REWRITE = "1"  # part of the cache key: a change to what the rewrite does must change this

_SMALL = 4096  # elements: larger initializers are weights, never the scalars a mask or guard uses


def _elements(tensor: Any) -> int:
    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    return count


def simplify_attention_masks(graph: Any) -> int:
    """Build each distinct ``Where(cond, const, const)`` once and drop ``Where(IsNaN(p), 0, p)`` guards of
    softmax outputs, in place (see the module docstring). Constants may be ``Constant`` nodes or small
    initializers. Returns the number of nodes removed (0: the graph is left as it was)."""
    numpy_helper = require("onnx").numpy_helper
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1

    # Initializers hold constants too (newer exporters write them there); one that is also a graph input
    # is only a default the caller may override, so it is not a constant.
    inputs = {i.name for i in graph.input}
    initializers = {i.name: i for i in graph.initializer if i.name not in inputs}

    def constant(name: str) -> np.ndarray | None:
        init = initializers.get(name)
        if init is not None:
            return numpy_helper.to_array(init) if _elements(init) <= _SMALL else None
        node = producer.get(name)
        if node is None or node.op_type != "Constant" or len(node.attribute) != 1:
            return None
        attr = node.attribute[0]
        return numpy_helper.to_array(attr.t) if attr.name == "value" else None

    def is_zero(name: str) -> bool:
        value = constant(name)
        return value is not None and value.size == 1 and float(value.reshape(-1)[0]) == 0.0

    rename: dict[str, str] = {}
    dropped: set[int] = set()
    first: dict[tuple[str, bytes, bytes], str] = {}
    for node in graph.node:
        if node.op_type != "Where":
            continue
        cond = producer.get(node.input[0])
        guarded = producer.get(node.input[2])
        if (
            cond is not None
            and cond.op_type == "IsNaN"
            and cond.input[0] == node.input[2]
            and guarded is not None
            and guarded.op_type == "Softmax"  # only a fully masked row makes a softmax NaN
            and readers.get(cond.output[0]) == 1
            and is_zero(node.input[1])
        ):
            rename[node.output[0]] = node.input[2]
            dropped.update((id(node), id(cond)))
            continue
        when_true, when_false = constant(node.input[1]), constant(node.input[2])
        if when_true is None or when_false is None:
            continue
        key = (
            node.input[0],
            when_true.dtype.str.encode() + repr(when_true.shape).encode() + when_true.tobytes(),
            when_false.dtype.str.encode() + repr(when_false.shape).encode() + when_false.tobytes(),
        )
        if key in first:
            rename[node.output[0]] = first[key]
            dropped.add(id(node))
        else:
            first[key] = node.output[0]
    if not dropped or {o.name for o in graph.output} & set(rename):
        return 0  # nothing to do, or a graph output would lose its producer: leave the graph as it is
    kept = [node for node in graph.node if id(node) not in dropped]
    for node in kept:
        for i, name in enumerate(node.input):
            while name in rename:
                name = rename[name]
            node.input[i] = name
    # Constants only the dropped nodes read go too (onnxruntime warns about each one left unused).
    read = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    unread = {id(n) for n in kept if n.op_type == "Constant" and not any(o in read for o in n.output)}
    kept = [node for node in kept if id(node) not in unread]
    graph.ClearField("node")
    graph.node.extend(kept)
    return len(dropped) + len(unread)


def lean_graph(model_path: Path) -> bytes | None:
    """``model_path`` with ``simplify_attention_masks`` applied, serialised; None when it removes nothing,
    when onnx is not installed, when the weights live in external files (a graph loaded from bytes could
    not find them) or when onnx cannot read the file (onnxruntime then reports the error itself)."""
    try:
        onnx = require("onnx")
    except ImportError:
        return None
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # onnx raises its own types for unreadable files
        logger.debug("%s not rewritten: %s", model_path, exc)
        return None
    external = onnx.TensorProto.EXTERNAL
    if any(init.data_location == external for init in model.graph.initializer):
        return None
    if not simplify_attention_masks(model.graph):
        return None
    data: bytes = model.SerializeToString()
    return data


def lean_model(model_path: Path, folder: Path | None = None) -> str | bytes | None:
    """The lean rewrite of ``model_path`` to open instead of it: the path of a cached copy (written on first
    use under ``folder``, default ``<cache>/onnx/lean``), the bytes when that folder is not writable, or
    None when there is nothing to rewrite (remembered by an empty ``.none`` file) or it cannot be done."""
    try:
        stat = model_path.stat()
    except OSError:
        return None
    key = f"{model_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{_REWRITE}"
    folder = folder or cache_dir() / "onnx" / "lean"
    target = folder / f"{model_path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}-lean.onnx"
    nothing = target.with_suffix(".none")
    if target.is_file():
        return str(target)
    if nothing.is_file():
        return None
    data = lean_graph(model_path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(nothing if data is None else target, data or b"")
    except OSError as exc:
        logger.debug("lean graph of %s not cached: %s", model_path, exc)
        return data
    return None if data is None else str(target)


@contextmanager
def atomic_target(path: Path, *, suffix: str = ".part") -> Iterator[str]:
    """The path of a new temporary file beside ``path`` for the block to write; renamed to ``path`` when
    the block ends without an error and removed otherwise, so a crash never leaves a half-written file
    that later loads."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``atomic_target`` (also used for the digests of the exports in
    ``ragspine.models.onnx_export``)."""
    with atomic_target(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
