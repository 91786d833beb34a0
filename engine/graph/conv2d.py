"""Float 1-D convolutions as 2-D ones of height 1, so onnxruntime runs them blocked.

onnxruntime's CPU Conv runs a 1-D convolution as im2col and a matrix product; a 2-D one
it rewrites (its NCHWc transformer, where MLAS has blocked kernels: x86 AVX2/AVX-512)
into a direct convolution on channels blocked by 8 or 16, with a reorder on each side.
For the vocoder's narrow full-rate convolutions (32 channels, kernels 3-7) that is the
faster form on one thread: a worker lane's decoder 1.11-1.12x (fp32 and INT8 warm-up
RTF). On two threads it is slower (MLAS splits a height-1 conv poorly): only one-thread
sessions take it (precision.single_thread_decoder). Same arithmetic, a different
summation order: the audio equals the 1-D graph's to float rounding (121 dB SNR).

Quantized convolutions (QDQ: their weight comes through a DequantizeLinear) and convs
whose weight is not a constant are left as they are.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .nodes import attributes, has_subgraphs

CONV2D_MARK = "/conv2d"  # in the names of the tensors and nodes the rewrite adds


def rewrite_float_convs_2d(model: onnx.ModelProto) -> int:
    """Rewrite `model` in place: each 1-D Conv with a constant float weight becomes
    Unsqueeze → 2-D Conv (kernel [1, k]) → Squeeze. Returns how many were rewritten."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if has_subgraphs(model) or opset < 13:  # Unsqueeze takes its axes as an input from 13
        return 0
    graph = model.graph
    weights = {
        init.name: init for init in graph.initializer if init.data_type == onnx.TensorProto.FLOAT
    }
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    axes = f"{CONV2D_MARK}/axes"
    nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in graph.node:
        found = attributes(node)
        weight = weights.get(node.input[1]) if node.op_type == "Conv" else None
        if (
            weight is None
            or len(weight.dims) != 3  # a 1-D conv: [out, in / group, kernel]
            or readers.get(node.input[1], 0) != 1  # a shared weight keeps its 1-D shape
            or found.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        ):
            nodes.append(node)
            continue
        kernel = weight.dims[2]
        weight.CopyFrom(
            numpy_helper.from_array(numpy_helper.to_array(weight)[:, :, None, :], weight.name)
        )
        out = node.output[0]
        wide_in, wide_out = f"{out}{CONV2D_MARK}/in", f"{out}{CONV2D_MARK}/out"
        pads = found.get("pads", [0, 0])
        nodes += [
            helper.make_node(
                "Unsqueeze", [node.input[0], axes], [wide_in], name=f"{node.name}{CONV2D_MARK}/in"
            ),
            helper.make_node(
                "Conv",
                [wide_in, *node.input[1:]],
                [wide_out],
                name=node.name,
                kernel_shape=[1, kernel],
                dilations=[1, found.get("dilations", [1])[0]],
                strides=[1, found.get("strides", [1])[0]],
                pads=[0, pads[0], 0, pads[1]],
                group=found.get("group", 1),
            ),
            helper.make_node(
                "Squeeze", [wide_out, axes], [out], name=f"{node.name}{CONV2D_MARK}/out"
            ),
        ]
        rewritten += 1
    if not rewritten:
        return 0
    graph.initializer.append(numpy_helper.from_array(np.array([2], np.int64), axes))
    del graph.node[:]
    graph.node.extend(nodes)
    return rewritten
