"""The formats a client may ask for, their content types, and which sample rates each
codec can carry (FFmpeg's own lists: MPEG audio and ADTS have a table of rates, Opus
five)."""

from __future__ import annotations

import functools
from typing import Any

import av

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MIN_RATE, MAX_RATE = 8000, 48000

CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",  # Ogg Opus (RFC 7845)
    "aac": "audio/aac",  # ADTS
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",  # s16le mono; the rate is told beside it (X-Sample-Rate)
}

# format → (FFmpeg encoder, muxer, bits per second or None for lossless)
CODECS: dict[str, tuple[str, str, int | None]] = {
    "mp3": ("libmp3lame", "mp3", 64_000),
    "opus": ("libopus", "ogg", 32_000),
    "aac": ("aac", "adts", 64_000),
    "flac": ("flac", "flac", None),
}


class OutputError(ValueError):
    """A format or sample rate this layer cannot produce. `field` is "format" or
    "sample_rate"; `message(name)` says the same with the frontend's own name for it
    (HTTP's "response_format", the WebSocket's "encoding", …)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f'"{field}" {problem}')
        self.field = field
        self.problem = problem

    def message(self, name: str | None = None) -> str:
        return f'"{name or self.field}" {self.problem}'


@functools.cache
def codec_rates(fmt: str) -> tuple[int, ...] | None:
    """The sample rates (8–48 kHz) `fmt`'s encoder takes; None: any."""
    if fmt not in CODECS:
        return None
    rates = av.codec.Codec(CODECS[fmt][0], "w").audio_rates
    if not rates:
        return None
    return tuple(sorted(r for r in rates if MIN_RATE <= r <= MAX_RATE))


def check(fmt: Any, rate: Any = None) -> None:
    """Raise OutputError unless `fmt` is one of FORMATS and `rate` (None: the voice's
    own) is a whole number of Hz in 8000..48000 that `fmt` can carry."""
    if fmt not in FORMATS:
        shown = str(fmt)[:40]
        raise OutputError("format", f"must be one of {', '.join(FORMATS)} (got {shown!r})")
    if rate is None:
        return
    if isinstance(rate, bool) or not isinstance(rate, int) or not MIN_RATE <= rate <= MAX_RATE:
        raise OutputError("sample_rate", f"must be a whole number of Hz in {MIN_RATE}..{MAX_RATE}")
    allowed = codec_rates(fmt)
    if allowed is not None and rate not in allowed:
        listed = ", ".join(map(str, allowed))
        raise OutputError("sample_rate", f"for {fmt} must be one of {listed} (got {rate})")


def output_rate(fmt: str, source_rate: int, rate: int | None = None) -> int:
    """The rate `fmt` is made at: `rate` if asked (checked), else the voice's own, or
    the codec's nearest rate above it where the codec cannot carry it (Opus: 24 kHz
    for a 22.05 kHz voice)."""
    check(fmt, rate)
    if rate is not None:
        return rate
    allowed = codec_rates(fmt)
    if allowed is None or source_rate in allowed:
        return source_rate
    above = [r for r in allowed if r >= source_rate]
    return above[0] if above else allowed[-1]
