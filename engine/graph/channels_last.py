"""The decoder's activations channels-last ([1, T, C]) between its convolutions.

onnxruntime's NHWC transformer runs quantized convs channels-last but keeps every other
op in the model's layout (channels-first), so it wraps each conv in a pair of
transposes. Between a HiFi-GAN decoder's convs there are only elementwise ops (residual
adds, LeakyReLUs, the mean of the residual blocks): with the graph itself channels-last
between convs, the transposes the rewrite puts around each conv meet onnxruntime's and
cancel, and the quantized stages run from conv to conv without moving a tensor (Piper
medium: 40 transposes, 27 % of the INT8 decoder's time, down to 2; the same audio bit
for bit, 1.35x the speed).

Only a 1-D conv needs channels-first: elementwise ops follow their inputs' layout, a
polyphase upsampler's interleave (polyphase.py) becomes one Reshape, and any other op
gets its inputs back channels-first. The graph's inputs and outputs keep their layout.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .nodes import attributes, consumers, has_subgraphs

CHANNELS_LAST_MARK = "/channels_last"  # in the names of the nodes the rewrite adds
_SWAP = [0, 2, 1]  # [1, C, T] <-> [1, T, C]
_UNARY = frozenset({"LeakyRelu", "Relu", "Tanh", "Sigmoid", "Identity"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


def rewrite_channels_last(model: onnx.ModelProto, keep_first: frozenset[str] = frozenset()) -> int:
    """Rewrite `model` in place; returns the number of convs whose output is kept
    channels-last (0: the graph was left as it was).

    Convs named in `keep_first` (those an INT8 decoder keeps fp32) stay channels-first
    with what follows them: onnxruntime runs a float conv only channels-first, so a
    float stage rewritten would pay a transpose on each side of every conv (at the full
    rate, 22 % of the gate's INT8 decoder) where it now pays one at its entry."""
    if has_subgraphs(model):  # they would read channels-last tensors unseen
        return 0
    graph = model.graph
    constants = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    outputs = {out.name for out in graph.output}
    fed = {value.name for value in graph.input}  # initializers listed as inputs (old IRs)
    readers = consumers(graph)
    last: set[str] = set()  # tensors stored channels-last
    first_copy: dict[str, str] = {}  # channels-last tensor -> its channels-first copy
    nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    skip: set[int] = set()
    kept = 0

    def swap(name: str, out: str) -> str:
        nodes.append(
            helper.make_node("Transpose", [name], [out], name=out + "/Transpose", perm=_SWAP)
        )
        return out

    def to_first(name: str) -> str:
        if name not in last:
            return name
        if name not in first_copy:
            first_copy[name] = swap(name, f"{name}{CHANNELS_LAST_MARK}/ncw")
        return first_copy[name]

    def scalar(name: str) -> bool:
        """A one-element constant of rank ≤ 3 (broadcasts alike in either layout); not an
        initializer the caller may feed (a graph input)."""
        if name not in constants or name in fed:
            return False
        dims = constants[name].dims
        return len(dims) <= 3 and int(np.prod(dims, dtype=np.int64)) == 1

    def plain(node: onnx.NodeProto) -> None:
        """Any other op reads its inputs channels-first, as the model wrote it."""
        inputs = [to_first(name) if name else name for name in node.input]
        del node.input[:]
        node.input.extend(inputs)
        nodes.append(node)

    original = list(graph.node)
    for position, node in enumerate(original):
        if position in skip:
            continue
        free = not any(out in outputs for out in node.output)
        if (
            node.op_type == "Conv"
            and len(attributes(node).get("kernel_shape", [])) == 1
            and free
            and node.name not in keep_first
        ):
            own = node.output[0]
            node.input[0] = to_first(node.input[0])
            node.output[0] = f"{own}{CHANNELS_LAST_MARK}/ncw"
            nodes.append(node)
            swap(node.output[0], own)
            last.add(own)
            first_copy[own] = node.output[0]  # readers that need channels-first read the conv
            kept += 1
        elif node.op_type in _UNARY and free and node.input[0] in last:
            nodes.append(node)
            last.add(node.output[0])
        elif (
            node.op_type in _BINARY
            and free
            and any(name in last for name in node.input)
            and all(name in last or scalar(name) for name in node.input)
        ):  # a residual add, a mean's division: both sides channels-last, or a scalar
            nodes.append(node)
            last.add(node.output[0])
        elif (
            node.op_type == "Concat"
            and free
            and (interleave := _interleave(original, position, readers, constants, outputs))
            and all(name in last for name in node.input)
        ):
            flatten, channels = interleave
            skip.update(position + offset for offset in (1, 2, 3))
            for attribute in node.attribute:
                if attribute.name == "axis":
                    attribute.i = 2
            nodes.append(node)
            shape = f"{flatten.output[0]}{CHANNELS_LAST_MARK}/shape"
            new_inits.append(numpy_helper.from_array(np.array([0, -1, channels], np.int64), shape))
            nodes.append(
                helper.make_node(
                    "Reshape",
                    [node.output[0], shape],
                    [flatten.output[0]],
                    name=f"{flatten.name}{CHANNELS_LAST_MARK}",
                )
            )
            last.add(flatten.output[0])
        else:
            plain(node)
    if not kept:
        return 0
    read = {name for node in nodes for name in node.input} | outputs
    # A conv whose readers all take channels-first needs no channels-last copy.
    nodes = [n for n in nodes if n.op_type != "Transpose" or n.output[0] in read]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    dropped = {name for position in skip for name in original[position].input} - read - fed
    # The replaced interleaves' shapes: onnxruntime warns of each unread initializer.
    for init in [init for init in graph.initializer if init.name in dropped]:
        graph.initializer.remove(init)
    # Shapes recorded for the old layout would contradict the new one (a Concat of
    # phases is channels-last too), and the replaced interleaves' tensors are gone.
    gone = {name for position in skip for name in original[position].output}
    changed = last | gone | {node.output[0] for node in nodes if node.op_type == "Concat"}
    stale = [info for info in graph.value_info if info.name in changed]
    for info in stale:
        graph.value_info.remove(info)
    return kept


def _interleave(
    nodes: list[onnx.NodeProto],
    position: int,
    readers: dict[str, list[onnx.NodeProto]],
    constants: dict[str, onnx.TensorProto],
    outputs: set[str],
) -> tuple[onnx.NodeProto, int] | None:
    """The polyphase interleave after the phases Concat at `position` (polyphase.py):
    the last of the three nodes that follow it in graph order, and the channels it
    leaves; None if they are not that. Channels-last it is one Reshape: [1, T, s*C]
    (channel r*C + c) is [1, T*s, C] (sample t*s + r) as it lies in memory."""
    concat = nodes[position]
    if position + 3 >= len(nodes) or attributes(concat).get("axis") != 1:
        return None
    reshape, transpose, flatten = nodes[position + 1 : position + 4]
    chain = (
        reshape.op_type == "Reshape"
        and transpose.op_type == "Transpose"
        and flatten.op_type == "Reshape"
        and list(reshape.input[:1]) == [concat.output[0]]
        and list(transpose.input) == [reshape.output[0]]
        and list(flatten.input[:1]) == [transpose.output[0]]
        and len(readers.get(concat.output[0], [])) == 1
        and len(readers.get(reshape.output[0], [])) == 1
        and len(readers.get(transpose.output[0], [])) == 1
    )
    if not chain or reshape.input[1] not in constants or flatten.input[1] not in constants:
        return None
    if any(node.output[0] in outputs for node in (reshape, transpose, flatten)):
        return None  # a graph output keeps the model's layout
    split = numpy_helper.to_array(constants[reshape.input[1]]).tolist()
    flat = numpy_helper.to_array(constants[flatten.input[1]]).tolist()
    if len(split) != 4 or split[0] != 0 or min(split[1:3]) <= 0 or flat != [0, 0, -1]:
        return None
    if list(attributes(transpose).get("perm", [])) != [0, 2, 3, 1]:
        return None
    return flatten, int(split[2])
