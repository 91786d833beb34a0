"""Synthesis that fails over: an utterance whose voice raises mid-way goes on, once, on the
fallback synthesizer (`engine.fallback_voice` on `engine.fallback_provider`), from the
unit that failed, so the listener hears no unit twice; a voice that keeps failing is set
aside (every utterance goes straight to the fallback) and tried again later.

The policy, per voice (`FailoverPolicy`): `after` failures within `window_s` set the
voice aside for `probe_s`; past that, the next utterance asks for it again (a half-open
probe): a success brings it back, a failure sets it aside for another `probe_s`. A
request error (TextError, VoiceError: bad text, an unknown speaker) is the request's,
not the voice's: it is raised as before and never retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from magpie_tts.engine import AudioChunk, StopToken, SynthesisOptions, TextError, VoiceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailoverPolicy:
    after: int = 3  # failures within window_s that set a voice aside
    window_s: float = 60.0
    probe_s: float = 300.0  # how long a voice stays aside before it is tried again


@dataclass
class _Health:
    failures: deque[float] = field(default_factory=deque)
    aside_until: float | None = None
    last_error: str = ""


class _Units:
    """The units a stream pulled, kept so that a retry starts at the one that failed."""

    def __init__(self, units: Iterable[str], first_index: int) -> None:
        self._source = iter(units)
        self.first_index = first_index
        self.pulled: list[str] = []

    def __iter__(self) -> Iterator[str]:
        for unit in self._source:
            self.pulled.append(unit)
            yield unit

    @property
    def current(self) -> int:
        """The index of the unit being made (the last pulled)."""
        return self.first_index + max(len(self.pulled) - 1, 0)

    def from_(self, index: int) -> Iterator[str]:
        """Units from `index` on: those pulled already, then the rest of the source."""
        yield from self.pulled[index - self.first_index :]
        yield from self._source


def resample(pcm: np.ndarray, rate: int, to: int) -> np.ndarray:
    """Linear resampling of a chunk (only where the fallback's rate differs)."""
    if rate == to or not len(pcm):
        return pcm
    count = max(1, round(len(pcm) * to / rate))
    positions = np.linspace(0, len(pcm) - 1, count)
    return np.interp(positions, np.arange(len(pcm)), pcm).astype(np.int16)


class Failover:
    """The fallback synthesizer and each voice's health. `on_event(voice, what)` hears
    every failure ("retried", "failed": the fallback failed too) and "set_aside" /
    "restored" (metrics); `on_change()` when a voice is set aside or comes back (status)."""

    def __init__(
        self,
        fallback: Any,  # a StreamingSynthesizer
        policy: FailoverPolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fallback = fallback
        self.policy = policy
        self.clock = clock
        self.on_event: Callable[[str, str], None] = lambda voice, what: None
        self.on_change: Callable[[], None] = lambda: None
        self._health: dict[str, _Health] = {}
        self._lock = threading.Lock()

    # -- health -----------------------------------------------------------------------------

    def _aside(self, voice: str) -> bool:
        """Whether `voice` is set aside now (false once its probe is due)."""
        with self._lock:
            health = self._health.get(voice)
            until = health.aside_until if health is not None else None
        return until is not None and self.clock() < until

    def problems(self) -> list[str]:
        """One line per voice set aside now (status, /health)."""
        now = self.clock()
        with self._lock:
            return [
                f"voice {name} set aside after {self.policy.after} synthesis failures "
                f"({health.last_error}); speaking with {self.fallback.voice.name} on "
                f"{self.fallback.choice.used}, trying it again in "
                f"{max(0.0, health.aside_until - now):.0f} s"
                for name, health in self._health.items()
                if health.aside_until is not None
            ]

    def _failed(self, voice: str, exc: BaseException) -> None:
        now = self.clock()
        changed = False
        with self._lock:
            health = self._health.setdefault(voice, _Health())
            health.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            health.failures.append(now)
            while health.failures and now - health.failures[0] > self.policy.window_s:
                health.failures.popleft()
            probing = health.aside_until is not None  # the probe failed: aside again
            if probing or len(health.failures) >= self.policy.after:
                changed = health.aside_until is None
                health.aside_until = now + self.policy.probe_s
                health.failures.clear()
        if changed:
            log.error(
                "voice %s set aside for %.0f s after repeated synthesis failures (last: %s)",
                voice,
                self.policy.probe_s,
                health.last_error,
            )
            self.on_event(voice, "set_aside")
            self.on_change()

    def _succeeded(self, voice: str) -> None:
        with self._lock:
            health = self._health.get(voice)
            if health is None:
                return
            restored = health.aside_until is not None
            del self._health[voice]
        if restored:
            log.warning("voice %s is back: its probe utterance succeeded", voice)
            self.on_event(voice, "restored")
            self.on_change()

    # -- synthesis --------------------------------------------------------------------------

    def stream(
        self,
        synth: Any,
        units: Iterable[str],
        options: SynthesisOptions,
        stop: StopToken,
        first_index: int = 0,
        **kwargs: Any,
    ) -> Iterator[AudioChunk]:
        """`synth.stream_clauses(...)`, on the fallback while `synth`'s voice is set aside,
        and retried once on the fallback from the unit that failed; chunks at `synth`'s
        sample rate throughout."""
        fallback = self.fallback
        if fallback is None or synth is fallback:
            yield from synth.stream_clauses(units, options, stop, first_index=first_index, **kwargs)
            return
        name = synth.voice.name
        if self._aside(name):
            yield from self._on_fallback(synth, iter(units), options, stop, first_index, 0, kwargs)
            return
        seen = _Units(units, first_index)
        made, made_unit = 0, -1  # samples of unit `made_unit` already out
        chunks = synth.stream_clauses(seen, options, stop, first_index=first_index, **kwargs)
        try:
            for chunk in chunks:
                if chunk.clause_index != made_unit:
                    made, made_unit = 0, chunk.clause_index
                made += len(chunk.pcm)
                yield chunk
        except (TextError, VoiceError):
            raise  # the request's error, not the voice's
        except Exception as exc:
            if stop.stopped:
                raise
            at = seen.current
            log.error(
                "voice %s failed at unit %d (%s: %s); going on with %s",
                name,
                at,
                type(exc).__name__,
                str(exc)[:200],
                fallback.voice.name,
            )
            self.on_event(name, "retried")
            self._failed(name, exc)
        else:
            if not stop.stopped:
                self._succeeded(name)
            return
        skip = made if made_unit == at else 0
        yield from self._on_fallback(synth, seen.from_(at), options, stop, at, skip, kwargs)

    def _on_fallback(
        self,
        synth: Any,
        units: Iterator[str],
        options: SynthesisOptions,
        stop: StopToken,
        first_index: int,
        skip: int,
        kwargs: dict[str, Any],
    ) -> Iterator[AudioChunk]:
        """The units on the fallback, at `synth`'s rate. The first unit's first `skip`
        samples (at `synth`'s rate) are left out: they were heard before its voice failed
        (the same voice on another provider lines up in time; another voice roughly)."""
        fallback = self.fallback
        rate, its_rate = synth.voice.sample_rate, fallback.voice.sample_rate
        if fallback.voice.name != synth.voice.name:  # its speakers are not the voice's
            options = replace(options, speaker=None)
        skip = round(skip * its_rate / rate)
        chunks = fallback.stream_clauses(units, options, stop, first_index=first_index, **kwargs)
        try:
            for chunk in chunks:
                pcm = chunk.pcm
                if skip and chunk.clause_index == first_index:
                    pcm, skip = pcm[skip:], max(0, skip - len(pcm))
                    if not len(pcm):
                        continue
                pcm = resample(pcm, its_rate, rate)
                yield AudioChunk(pcm, rate, chunk.clause_index, chunk.compute_s, chunk.cached)
        except Exception:
            self.on_event(synth.voice.name, "failed")
            raise
