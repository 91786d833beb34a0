"""Latency self-test: fixed phrases through the warm engine, compared with the budget."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
from magpie_tts.engine import StreamingSynthesizer

from .config import SelftestConfig

log = logging.getLogger(__name__)

PHRASES = (
    "Okay.",
    "Your timer is done.",
    "It is twenty two degrees outside, with light rain expected after six thirty tonight.",
)


def run_selftest(synth: StreamingSynthesizer, budget: SelftestConfig) -> dict[str, Any]:
    """Time to first audio (median over phrases) and RTF; `passed` against the budget.

    It measures synthesis: the phrase cache is bypassed, so a warm cache (these phrases
    are common) cannot flatter the figures.
    """
    first_ms: list[float] = []
    total_s = audio_s = 0.0
    for phrase in PHRASES:
        started = time.perf_counter()
        first = None
        units = synth.clauses(phrase)
        for chunk in synth.stream_clauses(units, cache_use="bypass"):
            if first is None:
                first = (time.perf_counter() - started) * 1000
            audio_s += chunk.duration_s
        total_s += time.perf_counter() - started
        first_ms.append(first or 0.0)
    first_audio = float(np.median(first_ms))
    rtf = total_s / audio_s if audio_s else float("inf")
    problems = []
    if first_audio > budget.budget_first_audio_ms:
        problems.append(f"first audio {first_audio:.0f} ms > {budget.budget_first_audio_ms:g} ms")
    if rtf > budget.budget_rtf:
        problems.append(f"RTF {rtf:.3f} > {budget.budget_rtf:g}")
    result = {
        "passed": not problems,
        "first_audio_ms": round(first_audio, 1),
        "first_audio_max_ms": round(max(first_ms), 1),
        "rtf": round(rtf, 4),
        "warmup_ms": round(synth.warmup_ms, 1),
        "load_ms": round(synth.load_ms, 1),
        "budget": {"first_audio_ms": budget.budget_first_audio_ms, "rtf": budget.budget_rtf},
        "provider": synth.choice.used,
        "precision": synth.precision,
        "measured": "synthesis (phrase cache bypassed)",
    }
    if problems:
        result["problems"] = problems
    (log.info if not problems else log.warning)(
        "self-test %s: first audio %.1f ms (median), RTF %.3f, warm-up %.0f ms%s",
        "passed" if not problems else "OVER BUDGET",
        first_audio,
        rtf,
        synth.warmup_ms,
        "" if not problems else " — " + "; ".join(problems),
    )
    return result
