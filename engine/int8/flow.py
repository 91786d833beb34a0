"""INT8 flow in the frontend: only the flow (z_p → z, ~half the frontend's time) is
quantized. It runs after the duration predictor, so durations, and with them timing and
the seam, cannot change; the encoder feeding the duration predictor stays fp32
(quantizing it changes lengths). The INT8 flow is adopted only if the whole INT8 path
(flow and decoder) still meets the same bounds against the whole fp32 path, and it is
faster.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationMethod

from ..graph.flow_split import remove_frontend
from ..graph.split import SplitGraph
from ..precision import flow_path
from ..stream.decoder import ChunkedDecoder
from ..stream.synth import StreamingSynthesizer
from ..values import SynthesisOptions
from .calibration import CALIBRATION_SEED, CALIBRATION_TEXTS, GATE_TEXTS, latents_of
from .candidates import static_qdq
from .gate import MAX_LOG_MEL_DB, MAX_PAUSE_FLOOR_DBFS, MIN_SPEEDUP
from .measures import decode_latent, heard_audio, log_mel_distance, pause_floor_dbfs


def flow_convs(path: Path) -> list[str]:
    model = onnx.load(str(path), load_external_data=False)
    return [n.name for n in model.graph.node if n.op_type == "Conv" and "/flow/" in n.name]


def quantize_flow(
    synth: StreamingSynthesizer, split: SplitGraph, out: Path, texts: tuple[str, ...]
) -> bool:
    """Write the frontend with only its flow convolutions INT8, calibrated on texts."""
    names = flow_convs(split.frontend)
    if not names:
        return False
    options = SynthesisOptions()
    feeds = [
        synth.frontend_feeds(synth.phonemizer.clause_ids(c), options)
        for text in texts
        for c in synth.clauses(text)
    ]
    # MinMax: sentences differ in length (the histogram methods need equal shapes), and
    # the flow's ranges are tight and stable. The whole graph draws its own noise: seeded
    # while calibrating, so a prepare repeats, and unseeded again after.
    # Written in a temp folder and renamed into place: a file at `out` is whole.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".flow-") as tmp:
        seeded, made = Path(tmp) / "seeded.onnx", Path(tmp) / "flow.onnx"
        _seed_random_nodes(split.frontend, seeded, float(CALIBRATION_SEED))
        static_qdq(seeded, made, feeds, CalibrationMethod.MinMax, nodes_to_quantize=names)
        _seed_random_nodes(made, made, None)
        made.replace(out)
    return True


def _seed_random_nodes(model_path: Path, out: Path, seed: float | None) -> None:
    """Copy a graph with every random node seeded (None: the seed removed)."""
    model = onnx.load(str(model_path))
    for node in model.graph.node:
        if not node.op_type.startswith("Random"):
            continue
        kept = [a for a in node.attribute if a.name != "seed"]
        del node.attribute[:]
        node.attribute.extend(kept)
        if seed is not None:
            node.attribute.append(onnx.helper.make_attribute("seed", seed))
    onnx.save(model, str(out))


def prepare_flow(
    synth: StreamingSynthesizer,
    split: SplitGraph,
    int8: ChunkedDecoder,
    texts: tuple[str, ...] = CALIBRATION_TEXTS,
    gate_texts: tuple[str, ...] = GATE_TEXTS,
    expander: bool = True,
) -> dict[str, Any]:
    """Quantize the flow's convolutions and keep the result only if every gate sentence
    keeps its exact length, the whole INT8 path stays within the decoder's bounds against
    the whole fp32 path (noise off, same latent inputs), and the frontend gets faster."""
    out = flow_path(split)
    remove_frontend(out)
    if not quantize_flow(synth, split, out, texts):
        return {"frontend": "fp32", "frontend_reason": "no flow convolutions found"}
    options = SynthesisOptions()
    # The reference synth is fp32.
    fp32_front = latents_of(synth.graph_paths["frontend"], synth)
    int8_front = latents_of(out, synth)
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    distances, floors, timings = [], [], {"fp32": [], "int8": []}
    for text in gate_texts:
        reference = fp32_front(text, quiet, CALIBRATION_SEED)
        tested = int8_front(text, quiet, CALIBRATION_SEED)
        if [z.shape for z in reference] != [z.shape for z in tested]:
            remove_frontend(out)
            return {"frontend": "fp32", "frontend_reason": f"INT8 flow changed a length: {text!r}"}
        ref = np.concatenate([decode_latent(synth.decoder, z) for z in reference])
        test = heard_audio(int8, tested, synth.voice.sample_rate, expander)
        distances.append(log_mel_distance(ref, test, synth.voice.sample_rate))
        floors.append(pause_floor_dbfs(test, synth.voice.sample_rate))
    for _ in range(3):  # interleaved, like the decoder's timing
        for name, frontend in (("fp32", fp32_front), ("int8", int8_front)):
            begun = time.perf_counter()
            for text in gate_texts:
                frontend(text, options, CALIBRATION_SEED)
            timings[name].append(time.perf_counter() - begun)
    speedup = statistics.median(timings["fp32"]) / statistics.median(timings["int8"])
    distance, floor = statistics.mean(distances), statistics.mean(floors)
    facts = {
        "path_log_mel_db": round(distance, 2),
        "path_pause_floor_dbfs": round(floor, 1),
        "frontend_speedup": round(speedup, 3),
    }
    summary = (
        f"INT8 flow + INT8 decoder vs fp32: log-mel {distance:.2f} dB, pause floor "
        f"{floor:.1f} dBFS, frontend {speedup:.2f}x"
    )
    if distance > MAX_LOG_MEL_DB or floor > MAX_PAUSE_FLOOR_DBFS or speedup < MIN_SPEEDUP:
        remove_frontend(out)
        return {"frontend": "fp32", "frontend_reason": f"{summary}: kept fp32", **facts}
    return {"frontend": "flow int8", "frontend_reason": f"{summary}: adopted", **facts}
