"""Per-token integer products and the attention-mask simplification, on small graphs built here: exactness of
the mask rewrite (with the cases it must leave alone), closeness and batch independence of the quantised
products, and clear errors for graphs it cannot rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ragspine.models.onnx_token_quant import quantise_per_token, simplify_attention_masks  # noqa: E402

K, N = 16, 8


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name + "_v"))


def _masked_softmax_graph(
    *, extra_isnan_reader: bool = False, guard_is_output: bool = False
) -> onnx.ModelProto:
    """scores [B, S, S] and a bool key mask [B, 1, S]: two layers that each build the additive mask with
    ``Where(mask, 0, -inf)``, add it, take the softmax and guard it with ``Where(IsNaN(p), 0, p)``."""
    nodes = [
        _const("zero", np.array([0.0], np.float32)),
        _const("ninf", np.array([-np.inf], np.float32)),
    ]
    outputs = []
    for layer in range(2):
        p = f"l{layer}/"
        nodes += [
            helper.make_node("Where", ["mask", "zero", "ninf"], [p + "add_mask"]),
            helper.make_node("Add", ["scores", p + "add_mask"], [p + "masked"]),
            helper.make_node("Softmax", [p + "masked"], [p + "probs"], axis=-1),
            helper.make_node("IsNaN", [p + "probs"], [p + "nan"]),
            helper.make_node("Where", [p + "nan", "zero", p + "probs"], [p + "guarded"]),
        ]
        outputs.append(p + "guarded")
    graph_outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs]
    if extra_isnan_reader:
        nodes.append(helper.make_node("Cast", ["l0/nan"], ["nan_count"], to=TensorProto.FLOAT))
        graph_outputs.append(helper.make_tensor_value_info("nan_count", TensorProto.FLOAT, None))
    if not guard_is_output:
        nodes.append(helper.make_node("Add", outputs, ["sum"]))
        graph_outputs = [helper.make_tensor_value_info("sum", TensorProto.FLOAT, None), *graph_outputs[2:]]
    graph = helper.make_graph(
        nodes,
        "masks",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None, None]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [None, 1, None]),
        ],
        graph_outputs,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _mask_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    mask = np.ones((2, 1, 5), dtype=bool)
    mask[1, 0, 3:] = False  # the second text is padded
    return {"scores": rng.standard_normal((2, 5, 5)).astype(np.float32), "mask": mask}


def test_mask_simplification_is_exact_and_removes_the_repeats() -> None:
    model = _masked_softmax_graph()
    before = _run(model, _mask_feeds())
    removed = simplify_attention_masks(model.graph)
    assert removed == 5  # the second layer's mask Where, and both layers' IsNaN + Where (constants stay read)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Where") == 1 and "IsNaN" not in ops
    after = _run(model, _mask_feeds())
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_reverse_proof_the_guard_matters_only_for_a_row_with_every_key_masked() -> None:
    """What the guard is for: a text with every key masked gives NaN without it, 0 with it. Such a row
    cannot come from a tokenised text (it always attends to [CLS]); the rewrite relies on exactly that."""
    feeds = _mask_feeds()
    feeds["mask"][1, 0, :] = False
    model = _masked_softmax_graph()
    guarded = _run(model, feeds)[0]
    simplify_attention_masks(model.graph)
    unguarded = _run(model, feeds)[0]
    assert not np.isnan(guarded).any() and np.isnan(unguarded[1]).all()


def test_a_nan_test_read_elsewhere_and_a_guard_that_is_a_graph_output_stay() -> None:
    shared = _masked_softmax_graph(extra_isnan_reader=True)
    simplify_attention_masks(shared.graph)
    assert [n.op_type for n in shared.graph.node].count(
        "IsNaN"
    ) == 1  # layer 1's guard went, layer 0's stayed
    as_output = _masked_softmax_graph(guard_is_output=True)
    count = len(as_output.graph.node)
    assert simplify_attention_masks(as_output.graph) == 0 and len(as_output.graph.node) == count


def _linear_graph(weight: np.ndarray, *, opset: int = 17) -> onnx.ModelProto:
    """y = x @ W (+ a second product sharing x) for x [B, S, K]."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            helper.make_node("MatMul", ["x", "w2"], ["y2"]),
        ],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, K])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, N]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [None, None, N]),
        ],
        initializer=[
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(weight[:, ::-1].copy(), "w2"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _quantised(tmp_path: Path, model: onnx.ModelProto) -> ort.InferenceSession:
    source = tmp_path / "fp32.onnx"
    onnx.save(model, str(source))
    out = quantise_per_token(source, tmp_path / "tok.onnx")
    return ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_products_are_close_and_each_token_is_scaled_on_its_own(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((K, N)).astype(np.float32)
    session = _quantised(tmp_path, _linear_graph(weight))
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    x[1, 2] *= 1000.0  # one huge token
    y, y2 = session.run(None, {"x": x})
    exact = x @ weight
    assert y.shape == (2, 3, N) and y2.shape == (2, 3, N)
    relative = np.abs(y - exact).max(axis=-1) / np.abs(exact).max(axis=-1)
    assert relative.max() < 0.03  # every token, the small ones beside the huge one too
    # Each token alone gives exactly what it gives in the batch.
    for b in range(2):
        for s in range(3):
            alone = session.run(None, {"x": x[b : b + 1, s : s + 1]})[0]
            assert np.array_equal(alone[0, 0], y[b, s])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "tok.onnx")).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 2 and ops.count("QuantizeLinear") == 1  # x quantised once


def test_an_all_zero_token_gives_zeros_not_nan(tmp_path: Path) -> None:
    weight = np.random.default_rng(1).standard_normal((K, N)).astype(np.float32)
    session = _quantised(tmp_path, _linear_graph(weight))
    y = session.run(None, {"x": np.zeros((1, 2, K), np.float32)})[0]
    assert np.array_equal(y, np.zeros((1, 2, N), np.float32))


def test_graphs_it_cannot_rewrite_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        quantise_per_token(tmp_path / "missing.onnx", tmp_path / "out.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a graph")
    with pytest.raises(ValueError, match="could not be read"):
        quantise_per_token(garbage, tmp_path / "out.onnx")
    newer = tmp_path / "opset18.onnx"
    onnx.save(_linear_graph(np.ones((K, N), np.float32), opset=18), str(newer))
    with pytest.raises(ValueError, match="opset 18"):
        quantise_per_token(newer, tmp_path / "out.onnx")
    no_weights = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])],
            "plain",
            [
                helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2]),
            ],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 2])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    plain = tmp_path / "plain.onnx"
    onnx.save(no_weights, str(plain))
    with pytest.raises(ValueError, match="no MatMul with a constant"):
        quantise_per_token(plain, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_a_weight_stored_as_int8_with_a_scale_is_found_and_rewritten(tmp_path: Path) -> None:
    """Graphs that store a weight as int8 and compute it (Cast, then Mul by its scale) get the same
    treatment as a float initializer; the nodes that computed it are dropped."""
    rng = np.random.default_rng(2)
    stored = rng.integers(-127, 128, size=(K, N)).astype(np.int8)
    scale = np.float32(0.01)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["w_int8"], ["w_float"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["w_float", "w_scale"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "stored",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, N])],
        initializer=[
            numpy_helper.from_array(stored, "w_int8"),
            numpy_helper.from_array(np.array(scale), "w_scale"),
        ],
    )
    session = _quantised(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((1, 4, K)).astype(np.float32)
    exact = x @ (stored.astype(np.float32) * scale)
    y = session.run(None, {"x": x})[0]
    assert np.abs(y - exact).max() / np.abs(exact).max() < 0.03
    ops = [n.op_type for n in onnx.load(str(tmp_path / "tok.onnx")).graph.node]
    assert "MatMul" not in ops and "Cast" not in ops and ops.count("MatMulIntegerToFloat") == 1
