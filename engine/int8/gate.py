"""The gate: its bounds, the pick among candidates, WER over paired draws and the
verdict."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from ..stream.decoder import ChunkedDecoder
from ..stream.synth import StreamingSynthesizer
from ..values import SynthesisOptions, to_pcm
from ..voice import Voice
from .calibration import CALIBRATION_SEED, GATE_TEXTS, Latents, latents
from .measures import decode_latent, heard_audio

# 9: DNSMOS in the gate, the report keyed by onnxruntime and CPU; 8: quantized from the
# channels-last decoder; 7: INT8 residual adds; 6: INT8 heard through the expander (5:
# seeded, paired draws; 3: polyphase)
GATE_FORMAT = 9
# Bounds, calibrated in this metric: white noise added at 40 / 30 / 20 dB SNR measures
# 4.0 / 7.5 / 12.4 dB log-mel distance. A smart speaker in a quiet room shows hiss.
MAX_LOG_MEL_DB = 4.0
MAX_PAUSE_FLOOR_DBFS = -70.0  # fp32 pauses sit near -88 dBFS
MAX_WER_INCREASE = 0.02
# One noise draw per sentence moved either path's mean WER over the 22 gate sentences
# between 0.013 and 0.056 (same models, measured): the verdict flipped by chance.
WER_DRAWS = 3
# DNSMOS (mos.py) of the INT8 path against the fp32 path on the same latents: candidates
# within log-mel 4.0 dB still lost 0.3-0.45 P.808 (a listener hears it; the bounds above
# did not). A paired mean over the gate sentences: ~0.03 of noise on ten.
MAX_P808_DROP = 0.1
MAX_OVRL_DROP = 0.05
MIN_SPEEDUP = 1.15  # INT8 must beat fp32 by a margin, not by measurement noise
# Candidates this close in time are tied: quality decides. In one race (race_decoders) two
# candidates with the same kernels (other scales) measured 9.6 % apart; the adds-INT8
# decoder's rounds against convs alone spread 0.76-0.91 around a median of 0.86.
SPEED_NOISE = 1.10


def gate_verdict(report: dict[str, Any]) -> tuple[bool, str]:
    """INT8 becomes the default only if faster and no worse to the ear and the recognizer."""
    problems = []
    if report["speedup"] < MIN_SPEEDUP:
        problems.append(f"not fast enough ({report['speedup']:.2f}x < {MIN_SPEEDUP}x)")
    if report["log_mel_db"] > MAX_LOG_MEL_DB:
        problems.append(f"log-mel distance {report['log_mel_db']:.2f} dB > {MAX_LOG_MEL_DB} dB")
    if report["pause_floor_dbfs"] > MAX_PAUSE_FLOOR_DBFS:
        problems.append(
            f"hiss in pauses {report['pause_floor_dbfs']:.1f} dBFS > {MAX_PAUSE_FLOOR_DBFS} dBFS"
        )
    problems += mos_problems(report.get("mos_fp32"), report.get("mos_int8"))
    if "wer_int8" in report and report["wer_int8"] > report["wer_fp32"] + MAX_WER_INCREASE:
        problems.append(
            f"WER {report['wer_int8']:.3f} > fp32 {report['wer_fp32']:.3f} + {MAX_WER_INCREASE}"
        )
    if problems:
        return False, "; ".join(problems)
    mos, ref = report["mos_int8"], report["mos_fp32"]
    wer = (
        f"WER {report['wer_int8']:.3f} (fp32 {report['wer_fp32']:.3f})"
        if "wer_int8" in report
        else "WER not measured (no recognizer): gated on DNSMOS, log-mel and hiss"
    )
    return True, (
        f"{report['speedup']:.2f}x faster, DNSMOS P.808 {mos['p808']:.2f} (fp32 "
        f"{ref['p808']:.2f}), OVRL {mos['ovrl']:.2f} (fp32 {ref['ovrl']:.2f}), log-mel "
        f"{report['log_mel_db']:.2f} dB, pause floor {report['pause_floor_dbfs']:.1f} dBFS, {wer}"
    )


def mos_problems(fp32: dict[str, float] | None, int8: dict[str, float] | None) -> list[str]:
    """What DNSMOS holds against an INT8 path (none measured: that, the gate fails safe)."""
    if not fp32 or not int8:
        return ["DNSMOS not measured (the speechmos package is not installed)"]
    problems = []
    if int8["p808"] < fp32["p808"] - MAX_P808_DROP:
        problems.append(
            f"DNSMOS P.808 {int8['p808']:.2f} < fp32 {fp32['p808']:.2f} - {MAX_P808_DROP}"
        )
    if int8["ovrl"] < fp32["ovrl"] - MAX_OVRL_DROP:
        problems.append(
            f"DNSMOS OVRL {int8['ovrl']:.2f} < fp32 {fp32['ovrl']:.2f} - {MAX_OVRL_DROP}"
        )
    return problems


def paired_wer(
    scorer: Callable[[np.ndarray, int, str], float],
    fp32: ChunkedDecoder,
    int8: ChunkedDecoder,
    synth: StreamingSynthesizer,
    voice: Voice,
    int8_frontend: Latents | None = None,
    texts: tuple[str, ...] = GATE_TEXTS,
    expander: bool = True,
) -> tuple[float, float]:
    """Mean WER over the gate sentences and WER_DRAWS noise draws each: the fp32 path
    against the INT8 path (the INT8 frontend where adopted, else both decoders fed the
    same latents), draw k of both from the same seed."""
    fp32_rates, int8_rates = [], []
    options = SynthesisOptions()
    for draw in range(WER_DRAWS):
        seed = CALIBRATION_SEED + 1 + draw  # not the calibration's own noise
        for text in texts:
            clause_latents = latents(synth, text, seed)
            int8_latents = (
                clause_latents if int8_frontend is None else int8_frontend(text, options, seed)
            )
            reference = np.concatenate([decode_latent(fp32, z) for z in clause_latents])
            tested = heard_audio(int8, int8_latents, voice.sample_rate, expander)
            for audio, rates in ((reference, fp32_rates), (tested, int8_rates)):
                rates.append(scorer(to_pcm(audio), voice.sample_rate, text))
    return float(np.mean(fp32_rates)), float(np.mean(int8_rates))


def pick_candidate(scored: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Among candidates within the bounds, the one closest to fp32 (entry 5: the best
    DNSMOS P.808, negated, or the log-mel distance) of those
    within SPEED_NOISE of the fastest: timed pair by pair, two candidates swapped order
    between prepares here (1.21x / 1.52x, then 1.51x / 1.29x), so speed alone picked by
    chance; they are now timed in one race, and the tie is narrower. Candidates that
    quantize the same nodes (they differ only in calibration scales) run the same
    kernels: they share one speed, their median. None within the bounds: the closest.
    Entries end with what they quantize and keep fp32."""
    passing = [entry for entry in scored if not entry[0]]
    if not passing:
        return min(scored)
    timings: dict[Any, list[float]] = {}
    for entry in passing:
        timings.setdefault(entry[-1], []).append(entry[1])
    speed = {kept: statistics.median(times) for kept, times in timings.items()}
    fastest = min(speed.values())
    near = [entry for entry in passing if speed[entry[-1]] <= fastest * SPEED_NOISE]
    return min(near, key=lambda entry: entry[5])
