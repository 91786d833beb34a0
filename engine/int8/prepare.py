"""INT8 preparation: static QDQ quantization calibrated on real phoneme data, and its gate.

What to keep fp32 and how hard to clip the calibration ranges is chosen by measurement:
every candidate is scored on held-out sentences by log-mel distance to the fp32 decoder,
by the noise floor in pauses (hiss) and by speed; the fastest candidate within the
bounds is gated on speed, quality and WER.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from onnxruntime.quantization import CalibrationMethod

from ..graph.split import SplitGraph
from ..precision import CHANNELS_LAST, flow_path, int8_paths, layout_optimizers
from ..stream.decoder import ChunkedDecoder
from ..stream.synth import StreamingSynthesizer
from ..voice import Voice
from .calibration import (
    CALIBRATION_TEXTS,
    CALIBRATION_WINDOW,
    GATE_TEXTS,
    calibration_windows,
    latents,
    latents_of,
)
from .candidates import channels_last_split, conv_groups, decoder_candidates, quantize_candidate
from .flow import prepare_flow
from .gate import (
    GATE_FORMAT,
    MAX_LOG_MEL_DB,
    MAX_PAUSE_FLOOR_DBFS,
    WER_DRAWS,
    gate_verdict,
    paired_wer,
    pick_candidate,
)
from .measures import decode_latent, heard_audio, load_decoder, log_mel_distance, pause_floor_dbfs
from .race import measure_layout, race_decoders

Progress = Callable[[str], None]


def prepare_int8(
    synth: StreamingSynthesizer,
    split: SplitGraph,
    wer_scorer: Callable[[np.ndarray, int, str], float] | None = None,
    force: bool = False,
    progress: Progress = print,
) -> dict[str, Any]:
    """Build decoder.int8.onnx (and frontend.int8.onnx where its flow passes) beside the
    split graphs and write the gate report."""
    model_path, report_path = int8_paths(split)
    if not force and model_path.is_file() and report_path.is_file():
        report = json.loads(report_path.read_text())
        if report.get("format") == GATE_FORMAT and (report.get("wer_measured") or not wer_scorer):
            progress(f"INT8 already prepared ({report['reason']})")
            return report
    if synth.precision != "fp32":
        raise ValueError("prepare_int8 needs an fp32 synthesizer as its reference")
    started = time.perf_counter()
    voice = synth.voice
    progress(f"[1/5] calibration latents from {len(CALIBRATION_TEXTS)} sentences")
    calibration = calibration_windows(
        [z for text in CALIBRATION_TEXTS for z in latents(synth, text)],
        CALIBRATION_WINDOW,
    )
    gate_latents = [z for text in GATE_TEXTS for z in latents(synth, text)]
    fp32 = synth.decoder
    references = [decode_latent(fp32, z) for z in gate_latents]

    candidates = decoder_candidates(conv_groups(split))
    progress(f"[2/5] quantizing {len(candidates)} decoder candidates on {len(calibration)} windows")
    scored: list[list[Any]] = []
    passing: dict[int, ChunkedDecoder] = {}
    with tempfile.TemporaryDirectory(dir=model_path.parent) as tmp:
        # Candidates are quantized from the channels-last graph: the same arithmetic
        # (the same audio bit for bit), without onnxruntime's transposes around convs.
        last_split = channels_last_split(split, Path(tmp) / "decoder.channels_last.onnx")
        for index, (label, exclude, percentile, ops) in enumerate(candidates):
            path = Path(tmp) / f"candidate{index}.onnx"
            quantize_candidate(
                last_split or split,
                calibration,
                path,
                exclude,
                CalibrationMethod.Percentile,
                percentile,
                ops,
            )
            decoder = load_decoder(path, voice)
            outputs = [heard_audio(decoder, [z], voice.sample_rate) for z in gate_latents]
            distance = statistics.mean(
                log_mel_distance(ref, out, voice.sample_rate)
                for ref, out in zip(references, outputs, strict=True)
            )
            floor = statistics.mean(pause_floor_dbfs(o, voice.sample_rate) for o in outputs)
            good = distance <= MAX_LOG_MEL_DB and floor <= MAX_PAUSE_FLOOR_DBFS
            if good:  # speed decides only among candidates within the bounds
                passing[index] = decoder
            progress(
                f"      {label}: log-mel {distance:.2f} dB, pause floor {floor:.1f} dBFS"
                f"{'' if good else ' (over bounds)'}"
            )
            kept = (ops, tuple(sorted(exclude)))
            # Ranked by slowness (set by the race) within the bounds, else by distance.
            scored.append([not good, distance, index, label, path, distance, floor, kept])
        if passing:
            progress(f"      speed: {len(passing)} candidates within the bounds, in turn with fp32")
            fp32_s, *seconds = race_decoders([fp32, *passing.values()], gate_latents)
            for index, candidate_s in zip(passing, seconds, strict=True):
                scored[index][1] = candidate_s / fp32_s
                progress(f"      {scored[index][3]}: {fp32_s / candidate_s:.2f}x fp32 speed")
        _, _, index, label, best, distance, floor, _ = pick_candidate(
            [tuple(entry) for entry in scored]
        )
        plain = best
        if last_split is not None:  # the same candidate from the model's own graph
            _, exclude, percentile, ops = candidates[index]
            plain = Path(tmp) / "plain.onnx"
            quantize_candidate(
                split, calibration, plain, exclude, CalibrationMethod.Percentile, percentile, ops
            )
        layout = measure_layout(best if last_split else None, plain, voice, gate_latents)
        progress(f"      layout: {_layout_text(layout)}")
        # The gate's figures were measured on the channels-last candidate: the other
        # is installed only if it makes the same audio.
        if (
            plain != best
            and layout["cpu_layout"] != CHANNELS_LAST
            and not _same_audio(best, plain, voice, gate_latents[:4])
        ):
            layout["cpu_layout"] = CHANNELS_LAST
            progress("      the model's own graph quantized differently: channels-last kept")
        # A crash from here on must not leave an old report describing a new model.
        report_path.unlink(missing_ok=True)
        (best if layout["cpu_layout"] == CHANNELS_LAST else plain).replace(model_path)

    int8 = load_decoder(model_path, voice, layout_optimizers(layout))
    progress("[3/5] INT8 flow in the frontend (durations stay fp32)")
    flow = prepare_flow(synth, split, int8)
    progress(f"      {flow['frontend_reason']}")

    progress("[4/5] speed: fp32 vs INT8 decoder, interleaved")
    fp32_s, int8_s = race_decoders([fp32, int8], gate_latents)
    speedup = fp32_s / int8_s
    audio_s = sum(len(r) for r in references) / voice.sample_rate

    report: dict[str, Any] = {
        "format": GATE_FORMAT,
        "variant": label,
        "log_mel_db": round(distance, 2),
        "log_mel_bound_db": MAX_LOG_MEL_DB,
        "pause_floor_dbfs": round(floor, 1),
        "pause_floor_bound_dbfs": MAX_PAUSE_FLOOR_DBFS,
        "speedup": round(speedup, 3),
        "decoder_rtf_fp32": round(fp32_s / audio_s, 4),
        "decoder_rtf_int8": round(int8_s / audio_s, 4),
        "sentences": len(GATE_TEXTS),
        "wer_measured": wer_scorer is not None,
        "size_bytes": model_path.stat().st_size,
        "expander": True,  # every INT8 figure above was measured through it
        **layout,
        **flow,
    }
    progress(
        f"[5/5] intelligibility on {len(GATE_TEXTS)} sentences × {WER_DRAWS} draws"
        + ("" if wer_scorer else " skipped: no recognizer installed")
    )
    if wer_scorer is not None:
        adopted = flow["frontend"] != "fp32"
        int8_frontend = latents_of(flow_path(split), synth) if adopted else None
        wer_fp32, wer_int8 = paired_wer(wer_scorer, fp32, int8, synth, voice, int8_frontend)
        report.update(wer_fp32=round(wer_fp32, 4), wer_int8=round(wer_int8, 4))
    report["passed"], report["reason"] = gate_verdict(report)
    report["prepare_s"] = round(time.perf_counter() - started, 1)
    report_path.write_text(json.dumps(report, indent=2))
    return report


def _same_audio(a: Path, b: Path, voice: Voice, zs: list[np.ndarray]) -> bool:
    """Whether two decoders give the same samples (each latent decoded whole)."""
    first, second = load_decoder(a, voice), load_decoder(b, voice)
    return all(np.array_equal(first.decode(z).copy(), second.decode(z).copy()) for z in zs)


def _layout_text(layout: dict[str, Any]) -> str:
    speeds = ", ".join(f"{name} {x:.2f}x" for name, x in layout["layout_speedups"].items())
    return f"{layout['cpu_layout']} (speed against onnxruntime's NHWC: {speeds})"
