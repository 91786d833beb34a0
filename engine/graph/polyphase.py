"""ConvTranspose rewritten as its exact polyphase form: strided-free Convs, interleaved.

A 1-D transposed convolution with stride s is s ordinary convolutions over the same input
(one per output phase r, each taking every s-th tap of the kernel), their outputs
interleaved. The vocoder's upsampling layers then become plain Convs, which onnxruntime
runs with its fast Conv (GEMM) kernels and can quantize to INT8; ConvTranspose has neither on
the CPU and was ~39 % of the INT8 decoder's time. Phases whose taps reach the same input
frames share one Conv, so no multiply is spent on a zero tap. Output equals the original
to float rounding (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .nodes import attributes

POLYPHASE_MARK = "/phase"  # in the names of the Convs that replace an upsampler


@dataclass(frozen=True)
class PhaseGroup:
    """Consecutive output phases that read the same input frames m - jmax .. m - jmin."""

    first: int  # first phase r
    count: int
    jmin: int
    jmax: int

    @property
    def taps(self) -> int:
        return self.jmax - self.jmin + 1


def phase_groups(stride: int, kernel: int, pad: int) -> list[PhaseGroup] | None:
    """Output sample m*s + r sums x[m - j] * w[j*s + r + pad] over the j that index the
    kernel; None when some group would need a negative Conv padding (not this form)."""
    groups: list[PhaseGroup] = []
    for r in range(stride):
        jmin = -((r + pad) // stride)  # ceil((-r - pad) / s)
        jmax = (kernel - 1 - r - pad) // stride
        if jmax < jmin or jmax < 0 or jmin > 0:
            return None
        if groups and (groups[-1].jmin, groups[-1].jmax) == (jmin, jmax):
            last = groups[-1]
            groups[-1] = PhaseGroup(last.first, last.count + 1, jmin, jmax)
        else:
            groups.append(PhaseGroup(r, 1, jmin, jmax))
    return groups


def phase_weights(weight: np.ndarray, group: PhaseGroup, stride: int, pad: int) -> np.ndarray:
    """Conv weight [count*Cout, Cin, taps] of a group from ConvTranspose's [Cin, Cout, k]."""
    c_in, c_out, _ = weight.shape
    out = np.zeros((group.count, c_out, c_in, group.taps), dtype=weight.dtype)
    for i in range(group.count):
        r = group.first + i
        for q in range(group.taps):
            # Conv tap q reads x[m + q - jmax], i.e. j = jmax - q.
            tap = (group.jmax - q) * stride + r + pad
            out[i, :, :, q] = weight[:, :, tap].T
    return out.reshape(group.count * c_out, c_in, group.taps)


def rewrite_conv_transposes(model: onnx.ModelProto) -> int:
    """Replace every 1-D ConvTranspose of the form the vocoder uses (kernel - 2*pad ==
    stride, so the output is exactly stride × the input) in place; returns how many."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    rewritten = 0
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        replacement = _polyphase(node, inits) if node.op_type == "ConvTranspose" else None
        if replacement is None:
            nodes.append(node)
            continue
        new_nodes, new_inits = replacement
        nodes.extend(new_nodes)
        graph.initializer.extend(new_inits)
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
        used = {name for n in graph.node for name in n.input}
        keep = [i for i in graph.initializer if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    return rewritten


def _polyphase(
    node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None:
    attrs = attributes(node)
    kernel = attrs.get("kernel_shape", [])
    if len(kernel) != 1 or node.input[1] not in inits:
        return None
    (k,), (s,) = kernel, attrs.get("strides", [1])
    pads = attrs.get("pads", [0, 0])
    if (
        attrs.get("group", 1) != 1
        or attrs.get("dilations", [1]) != [1]
        or any(attrs.get("output_padding", [0]))
        or "output_shape" in attrs
        or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        or pads[0] != pads[1]
        or k - 2 * pads[0] != s
    ):
        return None
    pad = pads[0]
    groups = phase_groups(s, k, pad)
    if groups is None:
        return None
    weight = numpy_helper.to_array(inits[node.input[1]])
    c_out = weight.shape[1]
    bias = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 else None
    base = node.name or node.output[0]
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    phase_outputs = []
    for index, group in enumerate(groups):
        name = f"{base}{POLYPHASE_MARK}{index}"
        w_name, b_name = f"{name}/W", f"{name}/B"
        new_inits.append(numpy_helper.from_array(phase_weights(weight, group, s, pad), w_name))
        inputs = [node.input[0], w_name]
        if bias is not None:
            new_inits.append(numpy_helper.from_array(np.tile(bias, group.count), b_name))
            inputs.append(b_name)
        output = f"{name}_output"
        new_nodes.append(
            helper.make_node(
                "Conv",
                inputs,
                [output],
                name=f"{name}/Conv",
                kernel_shape=[group.taps],
                pads=[group.jmax, -group.jmin],
                strides=[1],
            )
        )
        phase_outputs.append(output)
    # [1, s*Cout, L] (channel r*Cout + o) → [1, s, Cout, L] → [1, Cout, L, s] → [1, Cout, L*s]
    stacked = phase_outputs[0]
    if len(phase_outputs) > 1:
        stacked = f"{base}/phases"
        new_nodes.append(
            helper.make_node("Concat", phase_outputs, [stacked], name=f"{base}/Concat", axis=1)
        )
    split_shape, flat_shape = f"{base}/split_shape", f"{base}/flat_shape"
    new_inits.append(numpy_helper.from_array(np.array([0, s, c_out, -1], np.int64), split_shape))
    new_inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), flat_shape))
    new_nodes += [
        helper.make_node(
            "Reshape", [stacked, split_shape], [f"{base}/split"], name=f"{base}/Reshape"
        ),
        helper.make_node(
            "Transpose",
            [f"{base}/split"],
            [f"{base}/interleaved"],
            name=f"{base}/Transpose",
            perm=[0, 2, 3, 1],
        ),
        helper.make_node(
            "Reshape",
            [f"{base}/interleaved", flat_shape],
            [node.output[0]],
            name=f"{base}/Flatten",
        ),
    ]
    return new_nodes, new_inits
