"""The engine's value types: what callers pass in and get back, shared by every layer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .errors import TextError


@dataclass(frozen=True)
class SynthesisOptions:
    speed: float = 1.0  # > 1 speaks faster (divides the voice's length_scale)
    noise_scale: float | None = None  # None: the voice's own value
    noise_w: float | None = None
    speaker: int | str | None = None

    def __post_init__(self) -> None:
        if not 0.25 <= self.speed <= 4.0:
            raise TextError(f"speed {self.speed} outside 0.25..4.0")
        for name in ("noise_scale", "noise_w"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 2.0:
                raise TextError(f"{name} {value} outside 0..2")


@dataclass(frozen=True)
class WordTime:
    """A spoken word (or an SSML mark) and when it sounds: seconds from the start of the
    stream's delivered audio (after speed and prosody, breaks included). A mark has
    start == end and kind "mark"."""

    word: str
    start: float
    end: float
    kind: Literal["word", "mark"] = "word"

    def shifted(self, seconds: float) -> WordTime:
        return WordTime(self.word, self.start + seconds, self.end + seconds, self.kind)


@dataclass
class AudioChunk:
    pcm: np.ndarray  # int16, mono
    sample_rate: int
    clause_index: int
    compute_s: float = 0.0  # synthesis time spent on this chunk (not waiting for text)
    cached: bool = False  # came from the phrase cache
    # The words (and marks) of the unit this chunk starts, on the first chunk of its
    # audio: before or with the audio they describe (stream/timing.py).
    words: list[WordTime] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


@dataclass
class StageTimes:
    """Where synthesis time goes, summed over everything made while attached
    (`StreamingSynthesizer.stages`): the bench's profile. Context overhead shows as ids
    and frames computed beyond the unit's own."""

    phonemize_s: float = 0.0
    frontend_s: float = 0.0
    decoder_s: float = 0.0
    pcm_s: float = 0.0
    ids: int = 0  # phoneme ids fed to the frontend (with context words)
    own_ids: int = 0  # of those, the units' own
    frames: int = 0  # latent frames kept as audio
    decoded_frames: int = 0  # frames fed to the decoder (with window context)

    def add(self, other: StageTimes) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class StopToken:
    """Set from any thread; the stream ends before decoding its next chunk."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def stop(self) -> None:
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()


def to_pcm(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
