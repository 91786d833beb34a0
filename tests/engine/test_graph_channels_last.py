"""The decoder channels-last between its convs: the same numbers, and, quantized, the
same audio without onnxruntime's transposes around every conv."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from magpie_tts.engine.graph.channels_last import rewrite_channels_last
from magpie_tts.engine.graph.split import split_voice
from magpie_tts.engine.int8.calibration import calibration_windows, latents
from magpie_tts.engine.int8.candidates import (
    channels_last_split,
    conv_groups,
    decoder_candidates,
    quantize_candidate,
)
from magpie_tts.engine.int8.measures import load_decoder
from magpie_tts.engine.int8.race import measure_layout
from magpie_tts.engine.precision import CHANNELS_LAST
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationMethod


def _run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    source = model if isinstance(model, str) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _optimized_ops(path: str, tmp_path) -> list[str]:
    """Op types of the graph onnxruntime runs (NHWC transformer on, as by default)."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


def test_the_voices_decoder_gives_the_same_numbers(voice, state_dir) -> None:
    split = split_voice(voice, state_dir)
    model = onnx.load(str(split.decoder))
    convs = sum(node.op_type == "Conv" for node in model.graph.node)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_channels_last(rewritten) == convs
    onnx.checker.check_model(rewritten)
    interleaves = [
        node
        for node in rewritten.graph.node
        if node.op_type == "Transpose" and list(node.attribute[0].ints) != [0, 2, 1]
    ]
    assert not interleaves  # each polyphase interleave is one Reshape now
    channels = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    z = np.random.default_rng(3).standard_normal((1, channels, 40)).astype(np.float32)
    feeds = {split.latent_name: z}
    (before,), (after,) = _run(model, feeds), _run(rewritten, feeds)
    assert before.shape == after.shape
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)


def test_convs_kept_fp32_stay_channels_first_with_no_transpose_around_them(
    voice, state_dir
) -> None:
    """The last stage a gate-passing INT8 decoder keeps fp32: its convs read and write
    channels-first (one transpose at the stage's entry, none between its convs), the
    rest is rewritten, and the numbers are the same."""
    split = split_voice(voice, state_dir)
    groups = conv_groups(split)
    last_stage = sorted(g for g in groups if g.startswith("upsample") and "." not in g)[-1]
    kept = frozenset(groups[last_stage] + groups["output"])
    model = onnx.load(str(split.decoder))
    convs = sum(node.op_type == "Conv" for node in model.graph.node)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_channels_last(rewritten, kept) == convs - len(kept)
    made = {out: node for node in rewritten.graph.node for out in node.output}
    read_by_transpose = {
        name for node in rewritten.graph.node if node.op_type == "Transpose" for name in node.input
    }
    entries = 0
    for node in rewritten.graph.node:
        if node.name not in kept:
            continue
        assert node.output[0] not in read_by_transpose
        source = made.get(node.input[0])
        if source is not None and source.op_type == "Transpose":
            assert "phase" in node.name  # only the upsampler reads stage 1 (channels-last)
            entries += 1
    assert entries >= 1
    channels = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    z = np.random.default_rng(4).standard_normal((1, channels, 40)).astype(np.float32)
    feeds = {split.latent_name: z}
    (before,), (after,) = _run(model, feeds), _run(rewritten, feeds)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)


def test_quantized_from_it_the_same_audio_without_the_transposes(
    voice, synth, state_dir, tmp_path
) -> None:
    """A candidate with every conv INT8, quantized from both graphs with the same
    calibration: the same audio bit for bit, and onnxruntime runs the channels-last one
    with no transpose between its convs (the other has one or two around each). (The
    candidates that keep the last stage fp32 leave it channels-first: the test above.)"""
    split = split_voice(voice, state_dir)
    zs = latents(synth, "The kitchen lights are on, and the front door is locked.")
    calibration = calibration_windows(zs, 96)
    candidates = decoder_candidates(conv_groups(split))
    _, exclude, percentile, ops = next(c for c in candidates if c[0].startswith("all convs"))
    last_split = channels_last_split(split, tmp_path / "decoder.channels_last.onnx")
    assert last_split is not None
    paths = {}
    for name, source in (("plain", split), ("last", last_split)):
        paths[name] = tmp_path / f"{name}.int8.onnx"
        quantize_candidate(
            source, calibration, paths[name], exclude, CalibrationMethod.Percentile, percentile, ops
        )
    plain, last = load_decoder(paths["plain"], voice), load_decoder(paths["last"], voice)
    for z in zs:
        assert np.array_equal(plain.decode(z).copy(), last.decode(z).copy())
    plain_ops = _optimized_ops(str(paths["plain"]), tmp_path)
    last_ops = _optimized_ops(str(paths["last"]), tmp_path)
    assert plain_ops.count("Transpose") >= 10
    assert last_ops.count("Transpose") <= 2  # the latent in, the output conv's input
    layout = measure_layout(paths["last"], paths["plain"], voice, zs[:1])
    assert layout["cpu_layout"] in (CHANNELS_LAST, "nhwc", "nchw")
    assert set(layout["layout_speedups"]) == {CHANNELS_LAST, "nhwc", "nchw"}
    assert layout["layout_speedups"]["nhwc"] == 1.0


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(value.astype(np.float32), name)


def test_ops_that_need_channels_first_get_them() -> None:
    """A slice of channels, a per-channel constant, a graph output read from inside
    the channels-last run, and a conv read by both layouts: the same numbers."""
    rng = np.random.default_rng(7)
    initializers = [
        _init("w1", rng.standard_normal((4, 3, 3))),
        _init("w2", rng.standard_normal((4, 2, 3))),
        _init("w3", rng.standard_normal((4, 4, 1))),
        _init("half", np.array(0.5)),
        _init("bias", rng.standard_normal((4, 1))),
        numpy_helper.from_array(np.array([0], np.int64), "lo"),
        numpy_helper.from_array(np.array([2], np.int64), "hi"),
        numpy_helper.from_array(np.array([1], np.int64), "axis"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["r1"], alpha=0.1),
        helper.make_node("Slice", ["r1", "lo", "hi", "axis"], ["s"]),  # channels 0-1
        helper.make_node("Conv", ["s", "w2"], ["c2"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Mul", ["c2", "half"], ["m"]),  # a scalar: stays channels-last
        helper.make_node("Add", ["m", "r1"], ["sum"]),  # both channels-last
        helper.make_node("Add", ["sum", "bias"], ["biased"]),  # per channel: channels-first
        helper.make_node("Conv", ["biased", "w3"], ["c3"], kernel_shape=[1]),
        helper.make_node("Add", ["c3", "sum"], ["y"]),  # a graph output
        helper.make_node("Tanh", ["sum"], ["t"]),  # a graph output too
    ]
    shape = ["batch", None, "time"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "time"])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, shape),
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_channels_last(rewritten) == 3
    onnx.checker.check_model(rewritten)
    x = {"x": rng.standard_normal((1, 3, 11)).astype(np.float32)}
    for before, after in zip(_run(model, x), _run(rewritten, x), strict=True):
        np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)
    assert [o.name for o in rewritten.graph.output] == ["y", "t"]


def _upsampler(extra_outputs: tuple[str, ...] = (), shapes_as_inputs: bool = False):
    """A conv, a two-phase polyphase upsampler (polyphase.py's interleave) and a
    LeakyReLU, with more graph outputs or its initializers listed as inputs."""
    rng = np.random.default_rng(11)
    initializers = [
        _init("w", rng.standard_normal((4, 3, 3))),
        _init("p0", rng.standard_normal((4, 4, 1))),
        _init("p1", rng.standard_normal((4, 4, 1))),
        _init("s4", np.full((1, 1, 1, 1), 2.0)),  # one element, but rank 4
        numpy_helper.from_array(np.array([0, 2, 4, -1], np.int64), "split"),
        numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Conv", ["c", "p0"], ["a"], kernel_shape=[1]),
        helper.make_node("Conv", ["c", "p1"], ["b"], kernel_shape=[1]),
        helper.make_node("Concat", ["a", "b"], ["phases"], axis=1),
        helper.make_node("Reshape", ["phases", "split"], ["split_up"]),
        helper.make_node("Transpose", ["split_up"], ["interleaved"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["interleaved", "flat"], ["up"]),
        helper.make_node("LeakyRelu", ["up"], ["y"], alpha=0.1),
        helper.make_node("Mul", ["c", "s4"], ["m"]),  # rank 4 out: not channels-last
        helper.make_node("Squeeze", ["m"], ["squeezed"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "time"])]
    if shapes_as_inputs:  # as exporters before IR 4 wrote them: feedable
        inputs += [
            helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in initializers
        ]
    ranks = {"y": 3, "squeezed": 2, "up": 3, "split_up": 4}
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * ranks[name])
        for name in ("y", "squeezed", *extra_outputs)
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    return onnx.shape_inference.infer_shapes(model)  # value_info, as a split graph has


@pytest.mark.parametrize(
    "extra_outputs, shapes_as_inputs",
    [((), False), (("up",), False), (("split_up",), False), ((), True)],
    ids=["plain", "interleave-is-an-output", "inner-tensor-is-an-output", "shapes-are-inputs"],
)
def test_an_upsampler_keeps_its_numbers_and_outputs(extra_outputs, shapes_as_inputs) -> None:
    model = _upsampler(extra_outputs, shapes_as_inputs)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_channels_last(rewritten) == 3
    onnx.checker.check_model(rewritten, full_check=True)  # shapes recorded agree
    interleaved = not extra_outputs
    assert (
        any(n.op_type == "Transpose" and n.output[0] == "interleaved" for n in rewritten.graph.node)
        != interleaved
    )
    x = {"x": np.random.default_rng(2).standard_normal((1, 3, 5)).astype(np.float32)}
    for before, after in zip(_run(model, x), _run(rewritten, x), strict=True):
        assert before.shape == after.shape
        np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)
