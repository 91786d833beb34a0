"""The earcon: a short tone on the speaker when an utterance cannot start in time or fails,
so a person at the speaker hears that something is coming, or went wrong.

Generated here at the voice's rate (no file, nothing downloaded): two soft sine blips,
rising (coming: 660 → 880 Hz) or falling (failed: 660 → 440 Hz), 80 ms each with 20 ms
raised-cosine fades and 60 ms apart, at −20 dBFS: 220 ms in all, quieter than speech
(the voice peaks near −3 dBFS) and without clicks.

`EarconTimer` arms when the speaker takes an utterance; if its first audio is not handed
to the player within `audio.earcon_after_ms`, the rising earcon is queued ahead of it
(once). Only the speaker uses it: client-bound audio gets its errors instead.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Literal, Protocol

import numpy as np

from ..player import Playback

Kind = Literal["coming", "failed"]
NOTES: dict[Kind, tuple[float, float]] = {"coming": (660.0, 880.0), "failed": (660.0, 440.0)}
BLIP_S = 0.08
FADE_S = 0.02
GAP_S = 0.06
LEVEL = 0.1  # −20 dBFS


@cache
def tone(rate: int, kind: Kind = "coming") -> np.ndarray:
    """The earcon as int16 PCM at `rate` (read-only: it is shared)."""
    length = round(BLIP_S * rate)
    t = np.arange(length) / rate
    fade = round(FADE_S * rate)
    envelope = np.ones(length)
    ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)  # raised cosine
    envelope[:fade], envelope[-fade:] = ramp, ramp[::-1]
    blips = [LEVEL * envelope * np.sin(2 * np.pi * f * t) for f in NOTES[kind]]
    gap = np.zeros(round(GAP_S * rate))
    pcm = np.round(np.concatenate([blips[0], gap, blips[1]]) * 32767).astype(np.int16)
    pcm.flags.writeable = False
    return pcm


class PlayerPort(Protocol):
    def submit(self, playback: Playback, pcm: np.ndarray) -> bool: ...
    def finish(self, playback: Playback) -> None: ...


def play(player: PlayerPort, rate: int, kind: Kind) -> Playback:
    """Queue the earcon on the player as an utterance of its own."""
    playback = Playback(sample_rate=rate)
    player.submit(playback, tone(rate, kind))
    player.finish(playback)
    return playback


class EarconTimer:
    """One speaker utterance's watch: the rising earcon if its first audio is not handed
    to the player within `after_s`. The speaker thread calls `first_audio` before it
    submits its first chunk: whichever comes first under the lock decides, so the tone
    is queued ahead of the speech or not at all."""

    def __init__(self, player: PlayerPort, rate: int, after_s: float) -> None:
        self.player = player
        self.rate = rate
        self.played: Playback | None = None
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True
        self._timer.name = "magpie-earcon"
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if not self._done:
                self._done = True
                self.played = play(self.player, self.rate, "coming")

    def first_audio(self) -> None:
        """The utterance's first audio is ready (or it ended): no earcon from now on."""
        with self._lock:
            self._done = True
        self._timer.cancel()
