"""Split a Piper/VITS graph into a frontend (ids → latent z) and a decoder (z → audio).

The seam is found structurally, not by tensor name: z is the first tensor (counting from
the inputs) through which every path from the text inputs to the audio output passes,
i.e. the outermost dominator of the output. Everything after it is the convolutional
vocoder, which is local in time and can be run on overlapping windows of z.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..errors import VoiceError
from ..voice import Voice
from .nodes import attributes, consumers, producers
from .polyphase import rewrite_conv_transposes

log = logging.getLogger(__name__)

_SOURCE = "\0source"
SPEAKER_INPUT = "sid"
# 2: the frontend also outputs the phoneme durations (frames per id), where the voice has them.
# 3: the decoder's ConvTransposes are in their polyphase form (polyphase.py).
# 4: the decoder's receptive field (context frames a window needs) is recorded.
SPLIT_FORMAT = 4
_PROBE_FRAMES = 100  # a latent length for shape inference (any length > 1 works)


@dataclass(frozen=True)
class SplitGraph:
    frontend: Path
    decoder: Path
    latent_name: str
    decoder_inputs: tuple[str, ...]
    durations_name: str | None = None  # frames per phoneme id, a second frontend output
    context_frames: int | None = None  # z frames one output sample sees on either side


def find_durations(model: onnx.ModelProto) -> str | None:
    """The rounded per-id durations: the one Ceil in a Piper/VITS graph (length regulator).

    They map phonemes to frames of z, so a unit spoken with context words around it can
    be cropped to its own words exactly. None where the graph has no single Ceil.
    """
    ceils = [node for node in model.graph.node if node.op_type == "Ceil"]
    return ceils[0].output[0] if len(ceils) == 1 else None


def find_latent(model: onnx.ModelProto) -> str:
    """Name of the decoder's input tensor z (outermost dominator of the audio output)."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    sources = [i.name for i in graph.input if i.name not in initializers | {SPEAKER_INPUT}]
    if len(graph.output) != 1:
        raise VoiceError("expected a single audio output in the voice graph")
    idom: dict[str, str] = {name: _SOURCE for name in sources}
    depth: dict[str, int] = {_SOURCE: 0, **{name: 1 for name in sources}}

    def common_dominator(a: str, b: str) -> str:
        while a != b:
            if depth[a] < depth[b]:
                a, b = b, a
            a = idom[a]
        return a

    for node in graph.node:  # ONNX requires topological order
        preds = [name for name in node.input if name in idom]
        if not preds:
            continue
        dom = preds[0]
        for other in preds[1:]:
            dom = common_dominator(dom, other)
        for out in node.output:
            idom[out] = dom
            depth[out] = depth[dom] + 1
        # A node with several reachable inputs merges paths: its outputs hang off the
        # common dominator; a node with one input hangs off that input.
        if len(preds) == 1:
            for out in node.output:
                idom[out] = preds[0]
                depth[out] = depth[preds[0]] + 1

    output = graph.output[0].name
    if output not in idom:
        raise VoiceError("audio output does not depend on the text input")
    chain = []
    node_of = output
    while node_of != _SOURCE:
        chain.append(node_of)
        node_of = idom[node_of]
    made_by, read_by = producers(graph), consumers(graph)
    # Outermost dominator that feeds a convolution: the vocoder's input.
    for name in reversed(chain):
        if name in made_by and any(n.op_type == "Conv" for n in read_by.get(name, [])):
            return name
    raise VoiceError("could not locate the vocoder input in the voice graph")


def receptive_frames(decoder: onnx.ModelProto, latent: str) -> int | None:
    """Frames of z on either side that can reach one output sample: the context a window
    needs for its core to decode exactly as in a whole decode. Each Conv reaches its
    padding (in samples at its own rate, found by shape inference) along the longest
    path; None where that cannot be read (implicit padding, unknown lengths)."""
    model = onnx.ModelProto()
    model.CopyFrom(decoder)
    graph = model.graph
    for value in graph.input:  # the latent, and a mask at its rate (the flow's)
        dims = value.type.tensor_type.shape.dim
        if value.name == latent or len(dims) == 3:
            dims[0].dim_value, dims[-1].dim_value = 1, _PROBE_FRAMES
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # onnx raises its own untyped errors for graphs it cannot follow
        return None
    lengths = {
        value.name: value.type.tensor_type.shape.dim[-1].dim_value
        for value in [*inferred.graph.value_info, *inferred.graph.input]
        if value.type.tensor_type.shape.dim
    }
    reach: dict[str, tuple[float, float]] = {latent: (0.0, 0.0)}  # frames (left, right)
    for node in graph.node:
        before = [reach[name] for name in node.input if name in reach]
        if not before:
            continue
        left, right = max(b[0] for b in before), max(b[1] for b in before)
        if node.op_type in ("Conv", "ConvTranspose"):
            attrs = attributes(node)
            rate = lengths.get(node.input[0], 0) / _PROBE_FRAMES
            if node.op_type == "ConvTranspose" or "pads" not in attrs or rate <= 0:
                return None
            span = (attrs["kernel_shape"][-1] - 1) * attrs.get("dilations", [1])[-1]
            begin = attrs["pads"][0]
            left, right = left + begin / rate, right + (span - begin) / rate
        for out in node.output:
            reach[out] = (left, right)
    edge = reach.get(graph.output[0].name)
    return None if edge is None else math.ceil(max(edge) - 1e-9)


def _decoder_uses_speaker(model: onnx.ModelProto, latent: str) -> bool:
    graph = model.graph
    if SPEAKER_INPUT not in {i.name for i in graph.input}:
        return False
    needed = {graph.output[0].name}
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            needed.update(name for name in node.input if name != latent)
    return SPEAKER_INPUT in needed


def split_dir(cache_dir: Path, voice: Voice) -> Path:
    return cache_dir / "models" / f"{voice.name}-{voice.model_hash}"


def split_voice(voice: Voice, cache_dir: Path) -> SplitGraph:
    """Return the cached split of the voice, building it once per model hash."""
    target = split_dir(cache_dir, voice)
    meta_path = target / "split.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == SPLIT_FORMAT:
            return SplitGraph(
                frontend=target / "frontend.onnx",
                decoder=target / "decoder.onnx",
                latent_name=meta["latent"],
                decoder_inputs=tuple(meta["decoder_inputs"]),
                durations_name=meta.get("durations"),
                context_frames=meta.get("context_frames"),
            )
    log.info("splitting %s into frontend and decoder (once per model)", voice.model_path.name)
    try:
        model = onnx.load(str(voice.model_path))
    except Exception as exc:  # onnx raises several unrelated types for bad files
        raise VoiceError(f"cannot read voice model {voice.model_path}: {exc}") from exc
    latent = find_latent(model)
    durations = find_durations(model)
    graph_inputs = [i.name for i in model.graph.input]
    decoder_inputs = [latent] + ([SPEAKER_INPUT] if _decoder_uses_speaker(model, latent) else [])
    output = model.graph.output[0].name
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        frontend_tmp, decoder_tmp = Path(tmp) / "frontend.onnx", Path(tmp) / "decoder.onnx"
        frontend_outputs = [latent] + ([durations] if durations else [])
        onnx.utils.extract_model(
            str(voice.model_path), str(frontend_tmp), graph_inputs, frontend_outputs
        )
        onnx.utils.extract_model(str(voice.model_path), str(decoder_tmp), decoder_inputs, [output])
        decoder = onnx.load(str(decoder_tmp))
        upsamplers = rewrite_conv_transposes(decoder)
        context = receptive_frames(decoder, latent)
        onnx.save(decoder, str(decoder_tmp))
        os.replace(frontend_tmp, target / "frontend.onnx")
        os.replace(decoder_tmp, target / "decoder.onnx")
    meta_path.write_text(
        json.dumps(
            {
                "format": SPLIT_FORMAT,
                "latent": latent,
                "decoder_inputs": decoder_inputs,
                "durations": durations,
                "context_frames": context,
            }
        )
    )
    log.info(
        "split at %s; decoder inputs %s; durations %s; %d upsamplers in polyphase form; "
        "receptive field %s frames",
        latent,
        decoder_inputs,
        durations,
        upsamplers,
        context,
    )
    return split_voice(voice, cache_dir)
