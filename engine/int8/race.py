"""Timing: decoders raced in turn, and the fastest layout to run an INT8 decoder in
(channels-last, onnxruntime's NHWC transformer, or plain NCHW)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..precision import CHANNELS_LAST
from ..runtime import NHWC_LAYOUT
from ..stream.decoder import ChunkedDecoder
from ..voice import Voice
from .measures import load_decoder

LAYOUT_MARGIN = 1.05  # another layout is adopted only when faster by more than noise
RACE_ROUNDS = 5


def _timed(decoder: ChunkedDecoder, zs: list[np.ndarray]) -> float:
    started = time.perf_counter()
    for z in zs:
        for _ in decoder.stream(z):
            pass
    return time.perf_counter() - started


def race_decoders(
    decoders: list[ChunkedDecoder], zs: list[np.ndarray], rounds: int = RACE_ROUNDS
) -> list[float]:
    """Median seconds of each decoder for the whole set, all in turn in every round (the
    order reversed every other round), so the host's drift hits all alike: timed pair by
    pair minutes apart, two candidates measured 1.68x and 1.87x fp32 in one prepare and
    0.86x each other's time (every one of 9 rounds faster) in a race."""
    times: list[list[float]] = [[] for _ in decoders]
    for round_index in range(rounds):
        order = list(enumerate(decoders))
        for index, decoder in order if round_index % 2 == 0 else reversed(order):
            times[index].append(_timed(decoder, zs))
    return [statistics.median(each) for each in times]


def measure_layout(
    channels_last: Path | None,
    plain: Path,
    voice: Voice,
    zs: list[np.ndarray],
    rounds: int = RACE_ROUNDS,
) -> dict[str, Any]:
    """The fastest way to run one INT8 decoder here, of the three that give the same
    audio bit for bit: quantized from the channels-last graph (graph/channels_last.py) with
    onnxruntime's NHWC transformer, and quantized from the model's own graph with the
    transformer (it transposes around every conv) or without it. The channels-last graph
    is kept unless another is faster by more than noise. Measured on each board: ARM's
    quantized kernels differ. Here (x86, AVX-512 VNNI): channels-last 0.75-0.82x the
    time of either other, which measured alike (0.98x)."""
    decoders = {
        "nhwc": load_decoder(plain, voice),
        "nchw": load_decoder(plain, voice, (NHWC_LAYOUT,)),
    }
    if channels_last is not None:
        decoders = {CHANNELS_LAST: load_decoder(channels_last, voice), **decoders}
    seconds = dict(zip(decoders, race_decoders(list(decoders.values()), zs, rounds), strict=True))
    fastest = min(seconds, key=seconds.__getitem__)
    first = next(iter(seconds))
    chosen = first if seconds[first] <= seconds[fastest] * LAYOUT_MARGIN else fastest
    return {
        "cpu_layout": chosen,
        # How much faster than onnxruntime's own layout on the model's graph.
        "layout_speedups": {name: round(seconds["nhwc"] / s, 3) for name, s in seconds.items()},
    }
