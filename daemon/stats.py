"""Rolling latency figures for status: time to first audio percentiles and RTF."""

from __future__ import annotations

import collections
import threading

import numpy as np


class RollingStats:
    def __init__(self, size: int = 500) -> None:
        self._ttfa: collections.deque[float] = collections.deque(maxlen=size)
        self._rtf: collections.deque[float] = collections.deque(maxlen=size)
        self._lock = threading.Lock()
        self.utterances = 0
        self.errors = 0
        self.stopped = 0

    def add(self, ttfa_ms: float | None, rtf: float | None) -> None:
        with self._lock:
            self.utterances += 1
            if ttfa_ms is not None:
                self._ttfa.append(ttfa_ms)
            if rtf is not None:
                self._rtf.append(rtf)

    def summary(self) -> dict[str, object]:
        with self._lock:
            ttfa = np.array(self._ttfa) if self._ttfa else None
            rtf = np.array(self._rtf) if self._rtf else None
            result: dict[str, object] = {
                "utterances": self.utterances,
                "errors": self.errors,
                "stopped": self.stopped,
            }
        if ttfa is not None:
            p50, p95, p99 = np.percentile(ttfa, [50, 95, 99])
            result["ttfa_ms"] = {
                "p50": round(p50, 1),
                "p95": round(p95, 1),
                "p99": round(p99, 1),
                "count": len(ttfa),
            }
        if rtf is not None:
            result["rtf"] = {"p50": round(float(np.median(rtf)), 4)}
        return result
