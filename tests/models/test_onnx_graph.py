"""Lean graphs: the exact mask/guard rewrite applied when a session opens, on small graphs built here and on
the real graphs our backends run (packaged MiniLM, SPLADE-tiny, exported cross-encoder and ColBERT).

The promise is bit-for-bit equal outputs with fewer operations; each comparison has a reverse proof that it
can fail (a rewrite that drops the padding mask must be caught)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ragspine.models import onnx_graph  # noqa: E402
from ragspine.models.device import make_onnx_session  # noqa: E402
from ragspine.models.onnx_graph import lean_graph, lean_model, simplify_attention_masks  # noqa: E402
from tests.models.test_token_quant import _masked_softmax_graph  # noqa: E402


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Each test caches lean graphs in its own folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "ragspine" / "onnx" / "lean"


def _guarded_softmax_graph(*, mask_constant_is_input: bool = False) -> onnx.ModelProto:
    """The two-layer masked-softmax graph of ``test_token_quant`` with its constants ("zero", "ninf") held
    as initializers instead of ``Constant`` nodes, as newer exporters write them."""
    model = _masked_softmax_graph()
    graph = model.graph
    for node in [n for n in graph.node if n.op_type == "Constant"]:
        graph.initializer.append(
            numpy_helper.from_array(numpy_helper.to_array(node.attribute[0].t), node.output[0])
        )
        graph.node.remove(node)
    if mask_constant_is_input:  # "ninf" is only a default the caller may replace
        graph.input.append(helper.make_tensor_value_info("ninf", TensorProto.FLOAT, [1]))
    return model


def _plain_model() -> onnx.ModelProto:
    """A graph with nothing to rewrite."""
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "plain",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    mask = np.ones((2, 1, 5), dtype=bool)
    mask[1, 0, 2:] = False
    return {"scores": rng.standard_normal((2, 5, 5)).astype(np.float32), "mask": mask}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, feeds)[0]
    return out


def test_constants_held_as_initializers_are_recognised_and_the_rewrite_is_exact() -> None:
    model = _guarded_softmax_graph()
    before = _run(model, _feeds())
    assert simplify_attention_masks(model.graph) == 5  # one repeated mask, two guards (IsNaN + Where each)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Where") == 1 and "IsNaN" not in ops
    assert np.array_equal(before, _run(model, _feeds()))


def test_an_initializer_that_is_also_a_graph_input_is_not_a_constant() -> None:
    """The caller may feed "ninf", so the mask ``Where`` nodes that read it are left alone (the guards, whose
    zero is a true constant, still go)."""
    model = _guarded_softmax_graph(mask_constant_is_input=True)
    simplify_attention_masks(model.graph)
    assert [n.op_type for n in model.graph.node].count("Where") == 2  # the masks stay: no constant seen


def test_a_nan_guard_on_anything_but_a_softmax_stays() -> None:
    """``Where(IsNaN(x), 0, x)`` on a division can see NaN for any input (0/0): removing it would change
    the output, so only guards of softmax outputs are dropped. Reverse proof: dropping it does change it."""
    zero = numpy_helper.from_array(np.array([0.0], np.float32), "zero")
    graph = helper.make_graph(
        [
            helper.make_node("Div", ["a", "b"], ["ratio"]),
            helper.make_node("IsNaN", ["ratio"], ["nan"]),
            helper.make_node("Where", ["nan", "zero", "ratio"], ["guarded"]),
            helper.make_node("Identity", ["guarded"], ["out"]),
        ],
        "div",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None]) for n in ("a", "b")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"a": np.array([0.0, 1.0], np.float32), "b": np.array([0.0, 2.0], np.float32)}
    assert simplify_attention_masks(model.graph) == 0
    assert np.array_equal(_run(model, feeds), [0.0, 0.5])
    unguarded = onnx.ModelProto()
    unguarded.CopyFrom(model)
    unguarded.graph.node[3].input[0] = "ratio"  # what dropping the guard would do
    assert np.isnan(_run(unguarded, feeds)[0])


def test_lean_graph_is_none_when_there_is_nothing_to_do_or_it_cannot_read_the_file(tmp_path: Path) -> None:
    onnx.save(_plain_model(), str(tmp_path / "plain.onnx"))
    assert lean_graph(tmp_path / "plain.onnx") is None
    (tmp_path / "junk.onnx").write_bytes(b"not a graph")
    assert lean_graph(tmp_path / "junk.onnx") is None
    with pytest.raises(
        ValueError, match="could not be loaded"
    ):  # onnxruntime's error still reaches the caller
        make_onnx_session(tmp_path / "junk.onnx", device="cpu")
    guarded = _guarded_softmax_graph()
    onnx.save(guarded, str(tmp_path / "guarded.onnx"))
    assert lean_graph(tmp_path / "guarded.onnx") is not None
    # Weights in an external file: bytes loaded elsewhere could not find them, so the file is used as it is.
    onnx.save(
        guarded,
        str(tmp_path / "external.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="external.bin",
        size_threshold=0,
    )
    assert lean_graph(tmp_path / "external.onnx") is None
    session = make_onnx_session(tmp_path / "external.onnx", device="cpu")
    assert np.array_equal(session.session.run(None, _feeds())[0], _run(_guarded_softmax_graph(), _feeds()))


def test_lean_model_is_cached_and_made_again_when_the_source_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _own_cache: Path
) -> None:
    calls: list[Path] = []
    real = onnx_graph.lean_graph

    def counting(path: Path) -> bytes | None:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(onnx_graph, "lean_graph", counting)
    source = tmp_path / "guarded.onnx"
    onnx.save(_guarded_softmax_graph(), str(source))
    first = lean_model(source)
    assert isinstance(first, str) and Path(first).parent == _own_cache and len(calls) == 1
    assert lean_model(source) == first and len(calls) == 1  # later starts open the cached copy
    session = make_onnx_session(source, device="cpu")
    assert np.array_equal(session.session.run(None, _feeds())[0], _run(_guarded_softmax_graph(), _feeds()))
    assert len(calls) == 1
    # Another model written to the same path: a new key, rewritten again (never the stale copy).
    other = _guarded_softmax_graph()
    other.graph.node[-1].op_type = "Mul"  # the two layers multiplied instead of added
    onnx.save(other, str(source))
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    second = lean_model(source)
    assert isinstance(second, str) and second != first and len(calls) == 2
    assert np.array_equal(
        make_onnx_session(source, device="cpu").session.run(None, _feeds())[0], _run(other, _feeds())
    )


def test_nothing_to_rewrite_is_remembered_and_an_unwritable_cache_gives_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain.onnx"
    onnx.save(_plain_model(), str(plain))
    calls: list[Path] = []
    real = onnx_graph.lean_graph
    monkeypatch.setattr(onnx_graph, "lean_graph", lambda path: calls.append(path) or real(path))
    assert lean_model(plain) is None and lean_model(plain) is None and len(calls) == 1
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    source = tmp_path / "guarded.onnx"
    onnx.save(_guarded_softmax_graph(), str(source))
    data = lean_model(source, folder=blocked / "lean")
    assert isinstance(data, bytes)
    assert np.array_equal(
        _run(onnx.load_from_string(data), _feeds()), _run(_guarded_softmax_graph(), _feeds())
    )


def test_a_damaged_cached_copy_falls_back_to_the_original_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "guarded.onnx"
    onnx.save(_guarded_softmax_graph(), str(source))
    cached = lean_model(source)
    assert isinstance(cached, str)
    Path(cached).write_bytes(b"damaged")
    with caplog.at_level("WARNING", logger="ragspine.models.device"):
        session = make_onnx_session(source, device="cpu")
    assert "opening the file as it is" in caplog.text
    assert np.array_equal(session.session.run(None, _feeds())[0], _run(_guarded_softmax_graph(), _feeds()))


# ---------------------------------------------------------------------------------- the real graphs


def _encoder_feeds(session: Any) -> dict[str, np.ndarray]:
    """Token ids of a padded batch as a tokenizer gives them: [CLS] first, every text at least one token,
    rows padded to different lengths (the case the attention mask exists for)."""
    rng = np.random.default_rng(11)
    batch, length = 6, 40
    ids = rng.integers(1000, 20000, (batch, length)).astype(np.int64)
    ids[:, 0] = 101
    mask = np.ones((batch, length), np.int64)
    for row in range(batch):
        mask[row, max(1, length - 7 * row) :] = 0
    ids[mask == 0] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    names = [i.name for i in session.get_inputs()]
    return {name: feeds[name] for name in names}


def _outputs(path: Path, *, lean: bool) -> list[np.ndarray]:
    session = make_onnx_session(path, device="cpu", threads=1, lean=lean).session
    return list(session.run(None, _encoder_feeds(session)))


def _assert_lean_is_bit_identical(path: Path) -> None:
    assert lean_graph(path) is not None, f"{path.name}: expected repeated masks or NaN guards to remove"
    lean, plain = _outputs(path, lean=True), _outputs(path, lean=False)
    assert len(lean) == len(plain)
    for got, want in zip(lean, plain, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_packaged_minilm_runs_lean_with_the_same_outputs_bit_for_bit() -> None:
    from ragspine.models.packaged import minilm_int8_onnx

    path = minilm_int8_onnx()
    _assert_lean_is_bit_identical(path)
    model = onnx.load(str(path))
    simplify_attention_masks(model.graph)
    assert not any(n.op_type == "IsNaN" for n in model.graph.node)


def test_reverse_proof_a_rewrite_that_drops_the_padding_mask_is_caught(tmp_path: Path) -> None:
    """The comparison above is sensitive: the same graph with its additive mask replaced by zeros (padding
    attended to) differs from the original on a padded batch."""
    from ragspine.models.packaged import minilm_int8_onnx

    model = onnx.load(str(minilm_int8_onnx()))
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    mask_where = next(
        n
        for n in graph.node
        if n.op_type == "Where"
        and producer.get(n.input[0]) is not None
        and producer[n.input[0]].op_type != "IsNaN"
    )
    mask_where.input[2] = mask_where.input[1]  # both branches 0: the mask no longer masks anything
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))
    got = _outputs(broken, lean=False)[0]
    want = _outputs(minilm_int8_onnx(), lean=False)[0]
    assert not np.array_equal(got, want)


@pytest.mark.slow
def test_splade_cross_encoder_and_colbert_graphs_run_lean_bit_for_bit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    _tiny_cross_encoder_master: Path,
    _tiny_colbert_master: Path,
) -> None:
    from ragspine.models.onnx_export import export_splade
    from ragspine.models.onnx_rerank_export import export_colbert, export_cross_encoder
    from ragspine.models.packaged import splade_tiny_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for graph in (
        export_splade(splade_tiny_dir()),
        export_cross_encoder(_tiny_cross_encoder_master),
        export_colbert(_tiny_colbert_master),
    ):
        _assert_lean_is_bit_identical(graph)
