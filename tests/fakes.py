"""Fakes for fast unit tests of the daemon core: a player, a synthesizer, a registry.

They follow the real parts' contracts (the player reports the first frame and the unit
being played, the synthesizer yields one chunk per unit and honours the stop token);
the end-to-end tests run the real ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from magpie_tts.daemon.core.utterance import Event, Utterance
from magpie_tts.daemon.player import Playback
from magpie_tts.engine import AudioChunk, StopToken, VoiceError

RATE = 1000


class FakeVoice:
    name = "fake"
    sample_rate = RATE

    def speaker_id(self, speaker: Any) -> int | None:
        if speaker not in (None, 0):
            raise VoiceError(f"unknown speaker {speaker!r}")
        return None


class FakeSynth:
    """One 50 ms chunk per unit; `unit_delay` seconds of 'compute' per unit."""

    def __init__(self, unit_delay: float = 0.0) -> None:
        self.voice = FakeVoice()
        self.unit_delay = unit_delay
        self.spoken: list[str] = []

    def stream_clauses(
        self,
        units: Iterable[str],
        options: Any = None,
        stop: StopToken | None = None,
        cache_use: str = "auto",
        first_index: int = 0,
        priority: int = 0,
    ) -> Iterator[AudioChunk]:
        for index, unit in enumerate(units, start=first_index):
            if stop is not None and stop.stopped:
                return
            time.sleep(self.unit_delay)
            self.spoken.append(unit)
            yield AudioChunk(np.ones(50, np.int16), RATE, index, compute_s=0.001)


class FakeRegistry:
    def __init__(self, synth: FakeSynth) -> None:
        from magpie_tts.daemon.core.failover import Failover, FailoverPolicy

        self.synth = synth
        self.failover = Failover(None, FailoverPolicy())

    def check(self, name: str | None) -> FakeSynth:
        if name not in (None, "fake"):
            raise VoiceError(f"unknown voice {name!r}")
        return self.synth

    get = check

    def problems(self) -> list[str]:
        return []  # no voice on its fallback


class FakePlayer:
    """Plays each chunk for `chunk_s` seconds (interruptible), like a paced device."""

    def __init__(self, chunk_s: float = 0.0) -> None:
        self.chunk_s = chunk_s
        self.played: list[tuple[int | None, int]] = []  # (unit, frames)
        self._lock = threading.Lock()

    def submit(
        self, playback: Playback, pcm: Any, timeout: float | None = None, unit: int | None = None
    ) -> bool:
        if playback.cancelled:
            return False
        playback.unit_playing = unit
        with self._lock:
            self.played.append((unit, len(pcm)))
        playback.frames_written += len(pcm)
        if playback.first_frame_at is None:
            playback.first_frame_at = time.monotonic()
            if playback.on_first_frame is not None:
                playback.on_first_frame(playback)
        deadline = time.monotonic() + self.chunk_s
        while time.monotonic() < deadline and not playback.cancelled:
            time.sleep(0.002)
        return not playback.cancelled

    def finish(self, playback: Playback) -> None:
        playback.finished.set()

    def cancel(self, playback: Playback | None = None) -> None:
        if playback is not None and playback.cancelled_at is None:
            playback.cancelled_at = time.monotonic()


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self._cond = threading.Condition()

    def report(self, utterance: Utterance, event: Event) -> None:
        with self._cond:
            self.events.append((utterance.id, event.name, dict(event.fields)))
            self._cond.notify_all()

    def names(self, request_id: str) -> list[str]:
        with self._cond:
            return [name for rid, name, _ in self.events if rid == request_id]

    def fields(self, request_id: str, name: str) -> dict[str, Any]:
        with self._cond:
            return next(f for rid, n, f in self.events if rid == request_id and n == name)

    def wait(self, request_id: str, name: str, timeout: float = 5.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: name in self.names(request_id), timeout):
                raise TimeoutError(f"{request_id}: no {name}; got {self.names(request_id)}")


def fake_core(synth: FakeSynth | None = None, player: FakePlayer | None = None, **limits) -> Any:
    """A started Core on the fakes (call `shutdown` when done)."""
    from magpie_tts.daemon.core.core import Core, CoreLimits
    from magpie_tts.engine import TextPolicy

    core = Core(
        FakeRegistry(synth or FakeSynth()),
        player or FakePlayer(),
        TextPolicy(first_clause_words=0),
        CoreLimits(**{"max_queue": 8, "rate_per_minute": 1000, "stream_idle_s": 5, **limits}),
    )
    core.start()
    return core


class FakeHost:
    """The daemon as a frontend sees it (daemon/frontends/base.py's Host), on a Core
    with fakes: frontends are tested in-process, in milliseconds."""

    version = "0.0-test"

    def __init__(self, core: Any, ready: bool = True) -> None:
        self.core = core
        self.ready = ready
        self.healthy = True
        self.health = "ok"

    def status(self) -> dict[str, Any]:
        return {"state": "online", "health": self.health, "provider": "cpu", "precision": "fp32"}

    def catalogue(self) -> list[Any]:
        from pathlib import Path

        from magpie_tts.engine import VoiceSummary

        return [VoiceSummary("fake", Path("/voices/fake.onnx"), "en_US", RATE, ("alice",))]

    def metrics_text(self) -> bytes:
        return b"# HELP magpie_fake 1\n"
