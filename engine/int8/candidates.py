"""The decoder candidates: static QDQ quantization calibrated on real phoneme data.

u8 activations with per-channel s8 weights is the combination onnxruntime's CPU kernels
make fast; the output convolution stays fp32 (it sets the peak level), and the
upsamplers are plain Convs (graph/polyphase.py), so they quantize too. The residual adds
of the lower-rate stages may be INT8 as well (a candidate): those stages then run in
integers. Candidates are quantized from the decoder rewritten channels-last between its
convs (graph/channels_last.py): the same arithmetic, without a transpose around every
conv.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)

from ..graph.channels_last import rewrite_channels_last
from ..graph.polyphase import POLYPHASE_MARK
from ..graph.split import SplitGraph

# Clipping the rarest activations buys resolution for the rest: fewer clipped peaks
# (99.99) vs a finer step, i.e. less hiss (99.0); which wins is measured per candidate.
PERCENTILES = (99.99, 99.9, 99.0)


class _FeedReader(CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._items: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)


class _NoPreprocessHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """onnxruntime's quantizer prints its calibration steps and warns on the root logger
    about pre-processing for every candidate: a prepare shows its own progress instead
    (the candidates were measured as they are)."""
    hint = _NoPreprocessHint()
    logging.getLogger().addFilter(hint)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.getLogger().removeFilter(hint)


def static_qdq(
    model: Path,
    out: Path,
    feeds: list[dict[str, np.ndarray]],
    method: CalibrationMethod,
    ops: tuple[str, ...] = ("Conv",),
    **extra,
) -> None:
    """Static QDQ of `ops` (Convs) with the combination onnxruntime's CPU kernels make
    fast: u8 activations, per-channel s8 weights."""
    with _quiet_quantizer():
        quantize_static(
            str(model),
            str(out),
            _FeedReader(feeds),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=list(ops),
            calibrate_method=method,
            **extra,
        )


def quantize_candidate(
    split: SplitGraph,
    windows: list[np.ndarray],
    out: Path,
    exclude: list[str],
    method: CalibrationMethod,
    percentile: float = PERCENTILES[0],
    ops: tuple[str, ...] = ("Conv",),
) -> None:
    static_qdq(
        split.decoder,
        out,
        [{split.latent_name: window} for window in windows],
        method,
        ops,
        nodes_to_exclude=exclude,
        extra_options={"CalibPercentile": percentile},
    )


def _is_upsampler(node: onnx.NodeProto) -> bool:
    return node.op_type == "ConvTranspose" or POLYPHASE_MARK in node.name


def conv_groups(split: SplitGraph) -> dict[str, list[str]]:
    """Conv nodes by decoder stage, found by graph order: "input", "upsampleN" (an
    upsampler and the residual blocks after it), "upsampleN.blocks" (those blocks
    only) and "output" (the last conv); and "last adds", the Add nodes after the last
    upsampler."""
    model = onnx.load(str(split.decoder), load_external_data=False)
    groups: dict[str, list[str]] = {}
    stage, upsampling, stages = "input", False, 0
    convs = [n for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    for node in convs:
        if _is_upsampler(node):
            if not upsampling:  # the first phase of a new upsampler opens its stage
                stage, stages = f"upsample{stages}", stages + 1
            upsampling = True
            if node.op_type == "Conv":
                groups.setdefault(stage, []).append(node.name)
            continue
        upsampling = False
        groups.setdefault(stage, []).append(node.name)
        if stage != "input":
            groups.setdefault(f"{stage}.blocks", []).append(node.name)
    last = convs[-1].name
    for names in groups.values():
        if last in names:
            names.remove(last)
    groups["output"] = [last]
    # The residual adds (and multi-receptive-field sums) after the last upsampler: the
    # highest-rate stage, where the hiss comes from.
    upsamplers = [i for i, node in enumerate(model.graph.node) if _is_upsampler(node)]
    after = upsamplers[-1] if upsamplers else len(model.graph.node)
    groups["last adds"] = [n.name for n in model.graph.node[after:] if n.op_type == "Add"]
    return groups


Candidate = tuple[str, list[str], float, tuple[str, ...]]


def decoder_candidates(groups: dict[str, list[str]]) -> list[Candidate]:
    """(label, nodes kept fp32, calibration percentile, op types quantized), fastest of
    the likely to pass first (a daemon keeps the first within every bound): the last
    (highest-rate) stage's residual blocks fp32, its upsampler INT8 (1.58x fp32 in the
    race of 2026-12-07, P.808 4.00 against fp32's 3.99); that whole stage fp32 with the
    other stages' residual adds INT8 too (1.32x); that stage fp32 (1.39-1.49x); and two
    that quantize it (all convs INT8; the residual adds INT8 too but its own), which
    DNSMOS has refused so far.

    The last stage is where DNSMOS hears INT8 (docs/int8.md): quantized alone it costs
    P.808 0.37 (fp32 3.92 → 3.54 on 6 held-out sentences), each other stage alone at most
    0.03, and in speech as much as in pauses (pauses given back their fp32 samples it
    still lost 0.30): u8 steps on the full-rate, 32-channel signal are audible as
    roughness under speech, which no expander in pauses removes.

    With its adds INT8 a stage runs in integers from conv to conv (onnxruntime fuses the
    Dequantize → LeakyRelu → Quantize between them, and the add): no float tensors four
    times the size, no Dequantize (single-threaded). Measured: 0.80-0.93x the decoder's
    time of convs alone."""
    stages = sorted(g for g in groups if g.startswith("upsample") and "." not in g)
    output = groups["output"]
    last = stages[-1] if stages else None
    convs, adds = ("Conv",), ("Conv", "Add")
    plans: list[tuple[str, list[str], tuple[float, ...], tuple[str, ...]]] = []
    if last is not None:
        last_fp32 = output + groups[last]
        blocks_fp32 = output + groups[f"{last}.blocks"]
        plans.append((f"{last} blocks kept fp32", blocks_fp32, PERCENTILES[1:2], convs))
        if groups.get("last adds"):
            label = f"residual adds INT8 too, {last} kept fp32"
            plans.append((label, last_fp32 + groups["last adds"], PERCENTILES[1::-1], adds))
        plans.append((f"{last} kept fp32", last_fp32, PERCENTILES[1::-1], convs))
    plans.append(("all convs INT8 but the output conv", output, PERCENTILES[1:2], convs))
    if last is not None and groups.get("last adds"):
        label = f"residual adds INT8 too but {last}'s"
        plans.append((label, output + groups["last adds"], PERCENTILES[1:2], adds))
    return [
        (f"{label}, percentile {pct}", exclude, pct, ops)
        for label, exclude, percentiles, ops in plans
        for pct in percentiles
    ]


def channels_last_split(
    split: SplitGraph, out: Path, keep_first: frozenset[str] = frozenset()
) -> SplitGraph | None:
    """The split with its decoder rewritten channels-last (at `out`) but the convs in
    `keep_first` (a candidate's fp32 ones), or None where the rewrite finds no conv to
    keep so."""
    model = onnx.load(str(split.decoder))
    if not rewrite_channels_last(model, keep_first):
        return None
    onnx.save(model, str(out))
    return dataclasses.replace(split, decoder=out)
