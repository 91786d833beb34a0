"""No-op arithmetic (x + 0, x × exp(-0)) dropped from graphs, exactly."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
from magpie_tts.engine.graph.identities import drop_identity_arithmetic
from onnx import TensorProto, helper


def coupling_like() -> onnx.ModelProto:
    """y = (x + zeros_like(x)) ; out = (y - m) × exp(-zeros_like(m)) + skip, skip = 0 + y."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("ConstantOfShape", ["sx"], ["zx"]),
        helper.make_node("Add", ["x", "zx"], ["y"]),
        helper.make_node("Shape", ["m"], ["sm"]),
        helper.make_node("ConstantOfShape", ["sm"], ["logs"]),
        helper.make_node("Neg", ["logs"], ["neg"]),
        helper.make_node("Exp", ["neg"], ["scale"]),
        helper.make_node("Sub", ["y", "m"], ["centered"]),
        helper.make_node("Mul", ["centered", "scale"], ["scaled"]),
        helper.make_node("Add", ["zx", "y"], ["skip"]),
        helper.make_node("Add", ["scaled", "skip"], ["out"]),
    ]
    dims = [1, 3, "T"]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, dims),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, dims),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_no_ops_are_dropped_and_the_output_is_bit_identical() -> None:
    model = coupling_like()
    rng = np.random.default_rng(3)
    feeds = {name: rng.standard_normal((1, 3, 17)).astype(np.float32) for name in ("x", "m")}
    before = run(model, feeds)
    assert drop_identity_arithmetic(model) == 3  # x + 0, × exp(-0), 0 + y
    ops = [node.op_type for node in model.graph.node]
    assert ops == ["Sub", "Add"]  # zeros, their shapes and exp(-0) had no other reader
    assert np.array_equal(run(model, feeds), before)
    assert drop_identity_arithmetic(model) == 0  # nothing left to drop


def test_a_graph_output_made_by_a_no_op_keeps_its_node() -> None:
    model = coupling_like()
    model.graph.output[0].name = "y"  # y = x + 0 is now what the graph answers
    del model.graph.node[-1]
    assert drop_identity_arithmetic(model) == 2  # × exp(-0), 0 + y; y's own Add stays
    assert "y" in {o for node in model.graph.node for o in node.output}


def test_the_voices_flow_runs_without_no_ops(synth) -> None:
    """Piper's flow has 24 (speaker-less WaveNet sums, mean-only couplings); the split
    keeps none, and its output still equals the whole frontend's (checked when built)."""
    flow = onnx.load(str(synth.flow.flow))
    assert not [n for n in flow.graph.node if n.op_type == "ConstantOfShape"]
    frontend = onnx.load(str(synth.graph_paths["frontend"]))
    prior = synth.flow.prior
    plain = onnx.utils.Extractor(frontend).extract_model(
        [prior, synth.flow.mask], [synth.latent_name]
    )
    assert drop_identity_arithmetic(plain) >= 20


def test_a_lean_flow_that_fails_the_probes_falls_back_to_the_plain_one(
    split_with_rewrite,
) -> None:
    def broken(model: onnx.ModelProto) -> int:
        node = next(n for n in model.graph.node if n.op_type == "Add")
        node.op_type = "Sub"  # a wrong "simplification": z changes
        return 1

    split = split_with_rewrite("drop_identity_arithmetic", broken)
    kept = onnx.load(str(split.flow))
    assert [n for n in kept.graph.node if n.op_type == "ConstantOfShape"]  # the plain flow
