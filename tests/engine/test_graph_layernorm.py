"""Spelled-out layer norms fused into LayerNormalization nodes (the text encoder's)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from magpie_tts.engine import SynthesisOptions
from magpie_tts.engine.graph.layernorm import fuse_layer_norms
from onnx import TensorProto, helper, numpy_helper

CHANNELS = 6


def spelled_out_norm(exponent: float = 2.0, axes: tuple[int, ...] = (-1,)) -> onnx.ModelProto:
    """VITS's channel LayerNorm as opset 15 exports it, on (1, C, T): transpose, nine
    nodes, transpose back, and a Relu reading the result."""
    rng = np.random.default_rng(5)
    constants = [
        numpy_helper.from_array(np.array(exponent, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(rng.standard_normal(CHANNELS).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(CHANNELS).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("ReduceMean", ["t"], ["mean"], axes=list(axes)),
        helper.make_node("Sub", ["t", "mean"], ["centered"]),
        helper.make_node("Pow", ["centered", "two"], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["variance"], axes=list(axes)),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        helper.make_node("Div", ["centered", "deviation"], ["normal"]),
        helper.make_node("Mul", ["normal", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["normed"]),
        helper.make_node("Transpose", ["normed"], ["back"], perm=[0, 2, 1]),
        helper.make_node("Relu", ["back"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, "T"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        constants,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_spelled_out_norm_becomes_one_node_with_the_same_output() -> None:
    model = spelled_out_norm()
    x = (np.random.default_rng(1).standard_normal((1, CHANNELS, 23)) * 3 + 1).astype(np.float32)
    before = run(model, x)
    assert fuse_layer_norms(model) == 1
    assert [n.op_type for n in model.graph.node] == [
        "Transpose",
        "LayerNormalization",
        "Transpose",
        "Relu",
    ]
    assert model.opset_import[0].version == 15  # onnxruntime runs it at the graph's opset
    after = run(model, x)
    assert np.max(np.abs(after - before)) < 1e-5
    assert fuse_layer_norms(model) == 0


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(spelled_out_norm(exponent=3.0), id="not a square"),
        pytest.param(spelled_out_norm(axes=(1,)), id="not the last axis"),
    ],
)
def test_what_is_not_exactly_a_layer_norm_is_left_alone(model: onnx.ModelProto) -> None:
    nodes = len(model.graph.node)
    assert fuse_layer_norms(model) == 0
    assert len(model.graph.node) == nodes


def test_a_broadcast_gamma_is_left_alone() -> None:
    """LayerNormalization wants one gamma per channel; Mul would broadcast a (1,) one."""
    model = spelled_out_norm()
    for init in model.graph.initializer:
        if init.name in ("gamma", "beta"):
            init.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32), init.name))
    assert fuse_layer_norms(model) == 0


def test_a_norm_whose_inner_value_is_read_elsewhere_is_left_alone() -> None:
    model = spelled_out_norm()
    model.graph.output.append(helper.make_tensor_value_info("deviation", TensorProto.FLOAT, None))
    assert fuse_layer_norms(model) == 0


def test_the_voices_encoder_runs_fused_with_the_whole_frontends_durations(synth) -> None:
    """Piper's encoder and duration predictor have 36 layer norms; the split's encoder
    keeps none spelled out, and every id lasts as long as in the whole frontend."""
    encoder = onnx.load(str(synth.flow.encoder))
    ops = [n.op_type for n in encoder.graph.node]
    assert "ReduceMean" not in ops
    assert ops.count("LayerNormalization") >= 30
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    whole = ort.InferenceSession(
        str(synth.graph_paths["frontend"]), providers=["CPUExecutionProvider"]
    )
    for text in ("Turn on the kitchen lights.", "Your flight to Denver departs at seven fifteen."):
        ids = synth.phonemizer.clause_ids(text)
        feeds = synth.frontend_feeds(ids, quiet)
        reference = whole.run([synth.durations_name], feeds)[0]
        _, _, durations = synth.prior(ids, quiet, durations=True)
        assert durations is not None
        assert np.array_equal(durations, reference.reshape(-1).astype(np.int64))


@pytest.mark.parametrize("refused", [False, True], ids=["wrong numbers", "refused graph"])
def test_a_fused_encoder_that_fails_the_probes_falls_back_to_the_plain_one(
    split_with_rewrite, refused: bool
) -> None:
    def broken(model: onnx.ModelProto) -> int:
        node = next(n for n in model.graph.node if n.op_type == "Sqrt")
        # A wrong "fusion": the prior changes, or onnxruntime has no such kernel.
        node.op_type, node.name = ("NoSuchOp" if refused else "Exp"), "broken"
        return 1

    split = split_with_rewrite("fuse_layer_norms", broken)
    kept = onnx.load(str(split.encoder))
    assert "broken" not in {n.name for n in kept.graph.node}
    assert "ReduceMean" in {n.op_type for n in kept.graph.node}  # the plain encoder
