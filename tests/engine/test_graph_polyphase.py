"""Upsamplers in polyphase form: exact against ConvTranspose, and quantizable."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from magpie_tts.engine.graph.polyphase import phase_groups, rewrite_conv_transposes
from magpie_tts.engine.graph.split import split_voice
from magpie_tts.engine.int8.candidates import conv_groups, decoder_candidates
from onnx import TensorProto, helper, numpy_helper


def conv_transpose_model(
    c_in: int, c_out: int, stride: int, kernel: int, pad: int, bias: bool, seed: int, **extra
) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((c_in, c_out, kernel), np.float32), "W")]
    inputs = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "B"))
        inputs.append("B")
    node = helper.make_node(
        "ConvTranspose",
        inputs,
        ["y"],
        name="/ups/ConvTranspose",
        kernel_shape=[kernel],
        strides=[stride],
        pads=[pad, pad],
        **extra,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, None])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@settings(max_examples=25, deadline=None)
@given(
    stride=st.integers(1, 8),
    taps=st.integers(1, 3),
    c_in=st.integers(1, 6),
    c_out=st.integers(1, 6),
    frames=st.integers(1, 12),
    bias=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_polyphase_equals_conv_transpose(stride, taps, c_in, c_out, frames, bias, seed) -> None:
    """Any kernel of k = s + 2·pad (the vocoder uses k = 2s, pad = s/2)."""
    pad_total = (taps - 1) * stride  # kernel = taps·s, pad = (k - s) / 2 when even
    if pad_total % 2:
        pad_total += stride
    kernel, pad = stride + pad_total, pad_total // 2
    model = conv_transpose_model(c_in, c_out, stride, kernel, pad, bias, seed)
    x = np.random.default_rng(seed).standard_normal((1, c_in, frames)).astype(np.float32)
    reference = run(model, x)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert rewrite_conv_transposes(rewritten) == 1
    onnx.checker.check_model(rewritten)
    assert "ConvTranspose" not in {n.op_type for n in rewritten.graph.node}
    test = run(rewritten, x)
    assert test.shape == reference.shape == (1, c_out, frames * stride)
    assert np.max(np.abs(test - reference)) < 1e-4


def test_phase_groups_of_the_vocoder_shape_need_no_zero_taps() -> None:
    """k = 2s, pad = s/2: half the phases read frames (m-1, m), half (m, m+1): 2 taps."""
    groups = phase_groups(stride=8, kernel=16, pad=4)
    assert groups is not None
    assert [(g.first, g.count, g.taps) for g in groups] == [(0, 4, 2), (4, 4, 2)]
    assert sum(g.count * g.taps for g in groups) == 16  # every kernel tap used once


def test_other_transposed_convolutions_are_left_alone() -> None:
    for model in (
        conv_transpose_model(2, 3, 4, 8, 1, True, 0),  # output is not exactly s × input
        conv_transpose_model(2, 3, 4, 8, 2, True, 0, output_padding=[1]),
        conv_transpose_model(2, 2, 4, 8, 2, True, 0, group=2),
    ):
        before = model.SerializeToString()
        assert rewrite_conv_transposes(model) == 0
        assert model.SerializeToString() == before


def test_split_decoder_has_only_plain_convs_grouped_by_stage(voice, state_dir) -> None:
    """The real decoder (its exactness against the unsplit voice is in
    test_engine_stream): no ConvTranspose left, and the quantizer still sees its stages,
    each upsampler's phase convs ahead of that stage's residual blocks."""
    split = split_voice(voice, state_dir)
    model = onnx.load(str(split.decoder))
    assert "ConvTranspose" not in {n.op_type for n in model.graph.node}
    groups = conv_groups(split)
    stages = sorted(g for g in groups if g.startswith("upsample") and "." not in g)
    assert len(stages) == 3
    for stage in stages:
        blocks = groups[f"{stage}.blocks"]
        upsampler = [n for n in groups[stage] if n not in blocks]
        assert upsampler and all("/phase" in n for n in upsampler)
        assert blocks and not any("/phase" in n for n in blocks)
    assert groups["output"] == ["/dec/conv_post/Conv"]
    candidates = decoder_candidates(groups)
    # The fastest of the likely to pass first: the last stage's residual blocks fp32
    # (where DNSMOS hears INT8), its upsampler INT8; then that whole stage fp32 with the
    # other stages' residual adds INT8 too.
    _, exclude, _, ops = candidates[0]
    assert ops == ("Conv",) and exclude == groups["output"] + groups[f"{stages[-1]}.blocks"]
    _, exclude, _, ops = candidates[1]
    last = groups["output"] + groups[stages[-1]] + groups["last adds"]
    assert ops == ("Conv", "Add") and exclude == last
    model_adds = [n.name for n in model.graph.node if n.op_type == "Add"]
    assert 0 < len(groups["last adds"]) < len(model_adds)
    assert all(
        name.startswith("/dec/resblocks.") or name.startswith("/dec/Add") for name in model_adds
    )
    assert all(
        any(f"resblocks.{k}/" in a for k in (6, 7, 8)) or a in ("/dec/Add_4", "/dec/Add_5")
        for a in groups["last adds"]
    )
    every_conv = next(c for c in candidates if c[0].startswith("all convs"))
    assert every_conv[3] == ("Conv",) and every_conv[1] == groups["output"]
    assert all(groups["output"][0] in exclude for _, exclude, _, _ in candidates)
