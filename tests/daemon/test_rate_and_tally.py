"""The core's small parts: the sliding-window rate limit and the per-utterance tally."""

from __future__ import annotations

import numpy as np
from magpie_tts.daemon.core import rate
from magpie_tts.daemon.core.rate import RateLimit
from magpie_tts.daemon.core.stats import Tally
from magpie_tts.engine import AudioChunk


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sliding_minute_counts_accepted_requests_per_key() -> None:
    clock = Clock()
    limit = RateLimit(2, clock)
    assert limit.allows("a")
    limit.take("a")
    limit.take("a")
    assert not limit.allows("a") and limit.allows("b")  # keys are apart
    clock.now += 59.9
    assert not limit.allows("a")  # still inside the window
    clock.now += 0.2
    assert limit.allows("a")  # the oldest left the window


def test_checking_counts_nothing() -> None:
    limit = RateLimit(1, Clock())
    for _ in range(5):
        assert limit.allows()
    limit.take()
    assert not limit.allows()


def test_idle_clients_are_forgotten_past_the_key_limit(monkeypatch) -> None:
    monkeypatch.setattr(rate, "MAX_KEYS", 3)
    clock = Clock()
    limit = RateLimit(1, clock)
    for key in ("a", "b", "c"):
        limit.take(key)
    clock.now += 61
    limit.take("d")  # a fourth key: the idle ones go
    assert set(limit._times) == {"d"}


def chunk(samples: int, compute_s: float, cached: bool = False) -> AudioChunk:
    return AudioChunk(np.zeros(samples, np.int16), 1000, 0, compute_s, cached)


def test_the_tally_keeps_synthesis_and_cache_hits_apart() -> None:
    tally = Tally()
    assert tally.timing(None, 0.0)["rtf"] is None  # nothing synthesized
    tally.add(chunk(500, 0.1, cached=True))
    tally.add(chunk(1000, 0.2))
    tally.add(chunk(1000, 0.3))
    assert tally.first_cached is True
    assert tally.timing(12.5, 2.5) == {
        "ttfa_ms": 12.5,
        "duration_s": 2.5,
        "rtf": 0.25,  # 0.5 s of compute for 2 s synthesized; the cached 0.5 s apart
        "cached_s": 0.5,
    }
