"""Latency figures: one utterance's tally as its chunks go out, and the rolling first
audio percentiles and RTF that status reports.

Synthesized audio and phrase-cache hits are kept apart: a cache hit is not a measure of
synthesis, and mixing them would flatter the figures.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from magpie_tts.engine import AudioChunk


@dataclass
class Tally:
    """One utterance's audio as its chunks go out (to the player or to a client)."""

    audio_s: float = 0.0  # synthesized
    compute_s: float = 0.0  # spent synthesizing it
    cached_s: float = 0.0  # from the phrase cache
    first_cached: bool | None = None  # None: no chunk yet

    def add(self, chunk: AudioChunk) -> None:
        if chunk.cached:
            self.cached_s += chunk.duration_s
        else:
            self.audio_s += chunk.duration_s
            self.compute_s += chunk.compute_s
        if self.first_cached is None:
            self.first_cached = chunk.cached

    def timing(self, ttfa_ms: float | None, duration_s: float) -> dict[str, Any]:
        """The figures an utterance's terminal event carries."""
        return {
            "ttfa_ms": ttfa_ms,
            "duration_s": round(duration_s, 3),
            "rtf": round(self.compute_s / self.audio_s, 4) if self.audio_s > 0 else None,
            "cached_s": round(self.cached_s, 3),
        }


def _percentiles(values: collections.deque[float]) -> dict[str, float] | None:
    if not values:
        return None
    p50, p95, p99 = np.percentile(np.array(values), [50, 95, 99])
    return {
        "p50": round(float(p50), 1),
        "p95": round(float(p95), 1),
        "p99": round(float(p99), 1),
        "count": len(values),
    }


class RollingStats:
    def __init__(self, size: int = 500) -> None:
        self._ttfa: collections.deque[float] = collections.deque(maxlen=size)
        self._cached_ttfa: collections.deque[float] = collections.deque(maxlen=size)
        self._rtf: collections.deque[float] = collections.deque(maxlen=size)
        self._lock = threading.Lock()
        self.utterances = 0
        self.errors = 0
        self.stopped = 0
        self.rejected = 0

    def add(self, ttfa_ms: float | None, rtf: float | None, cached: bool = False) -> None:
        """One finished utterance. rtf: synthesis compute / synthesized audio (None when
        everything came from the cache)."""
        with self._lock:
            self.utterances += 1
            if ttfa_ms is not None:
                (self._cached_ttfa if cached else self._ttfa).append(ttfa_ms)
            if rtf is not None:
                self._rtf.append(rtf)

    def summary(self) -> dict[str, object]:
        with self._lock:
            result: dict[str, object] = {
                "utterances": self.utterances,
                "errors": self.errors + self.rejected,
                "stopped": self.stopped,
            }
            ttfa = _percentiles(self._ttfa)
            cached = _percentiles(self._cached_ttfa)
            rtf = float(np.median(np.array(self._rtf))) if self._rtf else None
        if ttfa is not None:
            result["ttfa_ms"] = ttfa
        if cached is not None:
            result["ttfa_cached_ms"] = cached
        if rtf is not None:
            result["rtf"] = {"p50": round(rtf, 4)}
        return result
