"""Float 1-D convs as 2-D ones of height 1 for one-thread decoder sessions: the same
numbers, quantized convs untouched, built once, and the blocked form where it exists."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from magpie_tts.engine import precision
from magpie_tts.engine.graph.conv2d import rewrite_float_convs_2d
from magpie_tts.engine.graph.split import split_voice
from magpie_tts.engine.runtime import blocked_convs
from onnx import TensorProto, helper, numpy_helper


def _run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    source = model if isinstance(model, str) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_the_voices_decoder_gives_the_same_numbers(voice, state_dir) -> None:
    split = split_voice(voice, state_dir)
    model = onnx.load(str(split.decoder))
    convs = sum(node.op_type == "Conv" for node in model.graph.node)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_float_convs_2d(rewritten) == convs
    onnx.checker.check_model(rewritten)
    left = [n for n in rewritten.graph.node if n.op_type == "Conv"]
    assert all(len(n.attribute[0].ints) == 2 for n in left if n.attribute[0].name == "kernel_shape")
    channels = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    z = np.random.default_rng(5).standard_normal((1, channels, 40)).astype(np.float32)
    feeds = {split.latent_name: z}
    before, after = _run(model, feeds), _run(rewritten, feeds)
    assert before.shape == after.shape
    np.testing.assert_allclose(after, before, rtol=0, atol=2e-5)


def _qdq_and_float_model() -> onnx.ModelProto:
    """One conv whose weight comes through a DequantizeLinear (as QDQ INT8 leaves it),
    then a float one with padding and dilation."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(-100, 100, (8, 8, 3), dtype=np.int8), "wq"),
        numpy_helper.from_array(np.full(8, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(8, np.int8), "wz"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 5)).astype(np.float32), "wf"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bf"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node("Conv", ["x", "w"], ["h"], name="quantized", pads=[1, 1]),
        helper.make_node(
            "Conv", ["h", "wf", "bf"], ["y"], name="float", pads=[6, 6], dilations=[3]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, "T"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_only_float_convs_are_rewritten() -> None:
    model = _qdq_and_float_model()
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_float_convs_2d(rewritten) == 1
    kernels = {
        n.name: len(helper.get_attribute_value(a))
        for n in rewritten.graph.node
        if n.op_type == "Conv"
        for a in n.attribute
        if a.name == "kernel_shape"
    }
    assert kernels == {"float": 2}  # the quantized conv has no kernel_shape: untouched
    x = np.random.default_rng(1).standard_normal((1, 8, 30)).astype(np.float32)
    np.testing.assert_allclose(_run(rewritten, {"x": x}), _run(model, {"x": x}), atol=1e-4)


@pytest.mark.skipif(not blocked_convs(), reason="no blocked conv kernels on this CPU")
def test_onnxruntime_runs_the_rewritten_convs_blocked(tmp_path) -> None:
    model = _qdq_and_float_model()
    rewrite_float_convs_2d(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath)
    assert any(n.domain.startswith("com.microsoft") for n in optimized.graph.node)


def test_the_one_thread_decoder_is_built_once(voice, state_dir, tmp_path, monkeypatch) -> None:
    split = split_voice(voice, state_dir)
    source = tmp_path / "decoder.onnx"
    source.write_bytes(split.decoder.read_bytes())
    monkeypatch.setattr(precision, "blocked_convs", lambda: True)
    built = precision.single_thread_decoder(source)
    assert built != source and built.parent == source.parent
    stamp = built.stat().st_mtime_ns
    assert precision.single_thread_decoder(source) == built
    assert built.stat().st_mtime_ns == stamp  # not rebuilt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    monkeypatch.setattr(precision, "blocked_convs", lambda: False)
    assert precision.single_thread_decoder(source) == source


def test_a_decoder_that_cannot_be_written_is_kept_as_it_is(
    voice, state_dir, tmp_path, monkeypatch, caplog
) -> None:
    """Where the blocked file cannot be put in place (here a folder stands in its way;
    a full disk or a read-only state dir alike), the session runs the 1-D graph."""
    split = split_voice(voice, state_dir)
    source = tmp_path / "decoder.onnx"
    source.write_bytes(split.decoder.read_bytes())
    blocker = tmp_path / "decoder.conv2d.onnx"
    blocker.mkdir()
    (blocker / "occupied").write_text("")
    monkeypatch.setattr(precision, "blocked_convs", lambda: True)
    with caplog.at_level(logging.WARNING):
        assert precision.single_thread_decoder(source) == source
    assert "1-D form" in caplog.text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
