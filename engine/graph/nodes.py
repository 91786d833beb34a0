"""Small facts about ONNX nodes and graphs that the graph rewrites (polyphase,
identities, layer norms, channels-last), the splits and the receptive field all read."""

from __future__ import annotations

from typing import Any

import onnx


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes by name, as Python values."""
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether any node carries a subgraph (If, Loop, Scan): those read outer names
    implicitly, so a rewrite that counts a tensor's readers from node inputs alone
    would miss some."""
    return any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for node in model.graph.node
        for a in node.attribute
    )


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """The node that makes each tensor, by tensor name."""
    return {out: node for node in graph.node for out in node.output}


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """The nodes that read each tensor (as a node input), in graph order, by tensor name."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers
