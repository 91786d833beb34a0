"""INT8 preparation: static QDQ quantization calibrated on real phoneme data, and its gate.

What to keep fp32 and how hard to clip the calibration ranges is chosen by measurement:
every candidate is scored on held-out sentences by log-mel distance to the fp32 decoder,
by the noise floor in pauses (hiss), by DNSMOS (mos.py: what a listener would say) and
by speed; the fastest candidate within the bounds is gated on speed, quality and WER.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from onnxruntime.quantization import CalibrationMethod

from ..graph.split import SplitGraph
from ..precision import (
    CHANNELS_LAST,
    flow_path,
    int8_paths,
    layout_optimizers,
    read_report,
    write_report,
)
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
from .gate import GATE_FORMAT, WER_DRAWS, gate_verdict, paired_wer, pick_candidate
from .measures import load_decoder
from .race import measure_layout, race_decoders
from .scoring import Scorer

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PrepareSize:
    """How much a prepare measures. `magpie-tts prepare` takes the full sets; a daemon
    preparing in the background on one idle core fewer (8 / 10 / 3 rounds, and the
    sentence still held out from calibration, and the first candidate within every bound
    kept)."""

    calibration: int = len(CALIBRATION_TEXTS)
    gate: int = len(GATE_TEXTS)
    race_rounds: int = 5
    # Stop at the first candidate within every bound (they come fastest of the likely to
    # pass first): no race among candidates. `prepare` scores them all.
    first_fit: bool = False


def prepare_int8(
    synth: StreamingSynthesizer,
    split: SplitGraph,
    wer_scorer: Callable[[np.ndarray, int, str], float] | None = None,
    force: bool = False,
    progress: Progress = print,
    size: PrepareSize = PrepareSize(),
    fraction: Callable[[float], None] = lambda done: None,
) -> dict[str, Any]:
    """Build decoder.int8.onnx (and frontend.int8.onnx where its flow passes) beside the
    split graphs and write the gate report (last, atomically: it is what makes the
    files count). `fraction` hears the share done (0-1) as stages finish."""
    model_path, report_path = int8_paths(split)
    for stale in [*model_path.parent.glob(".int8*"), *model_path.parent.glob(".flow-*")]:
        # an interrupted prepare's temp files (a kill leaves them): never adopted
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    if not force and model_path.is_file():
        report = read_report(split)
        if (
            report
            and report.get("format") == GATE_FORMAT
            and (report.get("wer_measured") or not wer_scorer)
        ):
            progress(f"INT8 already prepared ({report['reason']})")
            return report
    if synth.precision != "fp32":
        raise ValueError("prepare_int8 needs an fp32 synthesizer as its reference")
    started = time.perf_counter()
    voice = synth.voice
    texts = CALIBRATION_TEXTS[: size.calibration]
    gate_texts = GATE_TEXTS[: size.gate]
    progress(f"[1/5] calibration latents from {len(texts)} sentences")
    calibration = calibration_windows(
        [z for text in texts for z in latents(synth, text)], CALIBRATION_WINDOW
    )
    gate_latents = [latents(synth, text) for text in gate_texts]
    fp32 = synth.decoder
    scorer = Scorer(voice, fp32, gate_latents)
    fraction(0.05)

    candidates = decoder_candidates(conv_groups(split))
    progress(
        f"[2/5] {len(candidates)} decoder candidates on {len(calibration)} windows; "
        f"fp32: {scorer.mos_text(scorer.reference_mos)}"
    )
    scored: list[list[Any]] = []
    passing: dict[int, Any] = {}
    flat = [z for zs in gate_latents for z in zs]
    # A crash from here on must not leave an old report describing a new model.
    report_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=model_path.parent, prefix=".int8-") as tmp:
        channels_last: set[int] = set()  # the candidates quantized from that graph
        for index, (label, exclude, percentile, ops) in enumerate(candidates):
            # Quantized from the graph channels-last between its INT8 convs (those it
            # keeps fp32 stay channels-first): the same arithmetic (the same audio bit
            # for bit), without onnxruntime's transposes around convs.
            last_split = channels_last_split(
                split, Path(tmp) / f"channels_last{index}.onnx", frozenset(exclude)
            )
            if last_split is not None:
                channels_last.add(index)
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
            score = scorer.candidate(decoder)
            if score.good:  # speed decides only among candidates within the bounds
                passing[index] = decoder
            progress(f"      {label}: {score.text}")
            kept = (ops, tuple(sorted(exclude)))
            # Ranked by slowness (set by the race) within the bounds, else by distance;
            # among the near-fastest, the best P.808 (the closest to fp32 without DNSMOS).
            rank = -score.mos.p808 if score.mos else score.distance
            scored.append([not score.good, score.distance, index, label, path, rank, score, kept])
            fraction(0.05 + 0.6 * (index + 1) / len(candidates))
            if size.first_fit and score.good:
                progress("      within every bound: the candidates after it are not tried")
                break
        if len(passing) > 1:
            progress(f"      speed: {len(passing)} candidates within the bounds, in turn with fp32")
            fp32_s, *seconds = race_decoders([fp32, *passing.values()], flat, size.race_rounds)
            for index, candidate_s in zip(passing, seconds, strict=True):
                scored[index][1] = candidate_s / fp32_s
                progress(f"      {scored[index][3]}: {fp32_s / candidate_s:.2f}x fp32 speed")
        _, _, index, label, best, _, score, _ = pick_candidate([tuple(e) for e in scored])
        fraction(0.72)
        plain = best
        _, exclude, percentile, ops = candidates[index]
        if index in channels_last:  # the same candidate from the model's own graph
            plain = Path(tmp) / "plain.onnx"
            quantize_candidate(
                split, calibration, plain, exclude, CalibrationMethod.Percentile, percentile, ops
            )
        layout = measure_layout(
            best if plain != best else None, plain, voice, flat, size.race_rounds
        )
        progress(f"      layout: {_layout_text(layout)}")
        # The gate's figures were measured on the channels-last candidate: the other
        # is installed only if it makes the same audio.
        if (
            plain != best
            and layout["cpu_layout"] != CHANNELS_LAST
            and not _same_audio(best, plain, voice, flat[:4])
        ):
            layout["cpu_layout"] = CHANNELS_LAST
            progress("      the model's own graph quantized differently: channels-last kept")
        (best if layout["cpu_layout"] == CHANNELS_LAST else plain).replace(model_path)
    fraction(0.8)

    int8 = load_decoder(model_path, voice, layout_optimizers(layout))
    progress("[3/5] INT8 flow in the frontend (durations stay fp32)")
    flow = prepare_flow(synth, split, int8, texts, gate_texts, score.expander)
    progress(f"      {flow['frontend_reason']}")
    adopted = flow["frontend"] != "fp32"
    mos_int8 = score.mos
    if adopted:  # the whole INT8 path, as it will speak, against the fp32 path
        front = latents_of(flow_path(split), synth)
        mos_int8 = scorer.path_mos(int8, front, gate_texts, score.expander)
        flow["path_mos"] = mos_int8.as_dict()
        if scorer.mos_problems(mos_int8):
            flow = {**flow, **scorer.drop_flow(split, mos_int8)}
            progress(f"      {flow['frontend_reason']}")
            adopted, mos_int8 = False, score.mos
    fraction(0.88)

    progress("[4/5] speed: fp32 vs INT8 decoder, interleaved")
    fp32_s, int8_s = race_decoders([fp32, int8], flat, size.race_rounds)
    speedup = fp32_s / int8_s
    audio_s = sum(len(r) for r in scorer.references) / voice.sample_rate
    fraction(0.93)

    report: dict[str, Any] = {
        "format": GATE_FORMAT,
        "variant": label,
        "log_mel_db": round(score.distance, 2),
        "pause_floor_dbfs": round(score.floor, 1),
        "mos_fp32": scorer.reference_mos.as_dict(),
        "mos_int8": mos_int8.as_dict() if mos_int8 else None,
        "candidates": [entry[6].summary(entry[3]) for entry in scored],
        "speedup": round(speedup, 3),
        "decoder_rtf_fp32": round(fp32_s / audio_s, 4),
        "decoder_rtf_int8": round(int8_s / audio_s, 4),
        "sentences": len(gate_texts),
        "calibration_sentences": len(texts),
        "wer_measured": wer_scorer is not None,
        "size_bytes": model_path.stat().st_size,
        # The candidate was heard with the expander, or without where that scored better
        # (it costs DNSMOS OVRL ~0.05 even on fp32): the synthesizer plays it the same way.
        "expander": score.expander,
        **layout,
        **flow,
    }
    progress(
        f"[5/5] intelligibility on {len(gate_texts)} sentences × {WER_DRAWS} draws"
        + ("" if wer_scorer else " skipped: no recognizer installed")
    )
    if wer_scorer is not None:
        int8_frontend = latents_of(flow_path(split), synth) if adopted else None
        wer_fp32, wer_int8 = paired_wer(
            wer_scorer, fp32, int8, synth, voice, int8_frontend, gate_texts, score.expander
        )
        report.update(wer_fp32=round(wer_fp32, 4), wer_int8=round(wer_int8, 4))
    report["passed"], report["reason"] = gate_verdict(report)
    report["prepare_s"] = round(time.perf_counter() - started, 1)
    write_report(split, report)
    fraction(1.0)
    return report


def _same_audio(a: Path, b: Path, voice: Voice, zs: list[np.ndarray]) -> bool:
    """Whether two decoders give the same samples (each latent decoded whole)."""
    first, second = load_decoder(a, voice), load_decoder(b, voice)
    return all(np.array_equal(first.decode(z).copy(), second.decode(z).copy()) for z in zs)


def _layout_text(layout: dict[str, Any]) -> str:
    speeds = ", ".join(f"{name} {x:.2f}x" for name, x in layout["layout_speedups"].items())
    return f"{layout['cpu_layout']} (speed against onnxruntime's NHWC: {speeds})"
