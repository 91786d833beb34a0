"""Joining units cut mid-sentence, so the listener hears one phrase, not two utterances.

A cut unit is spoken with the words around it (segment.Unit) and cropped to its own
frames of z by the phoneme durations; the next unit starts where its own words begin.
The two latents come from separate frontend runs, so the join is crossfaded over one
frame (~12 ms at 22 kHz) centred on the word boundary: each side is decoded one frame
past it, and the earlier unit's last half-frame waits for the next unit's first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UnitSpan:
    """Frames of z to decode and the samples of that audio to emit and to hold."""

    decode_from: int  # frames [decode_from, decode_to) go through the decoder
    decode_to: int
    skip: int  # samples dropped at the start of the decoded audio
    emit: int  # samples emitted after those, the held ones included
    hold: int  # the last `hold` of them wait for the next unit's crossfade
    joins_previous: bool  # its first `hold`-sized samples crossfade with a held tail


def unit_span(frames: int, lo: int, hi: int, hop: int, before: bool, after: bool) -> UnitSpan:
    """The span of a unit whose own frames are [lo, hi) of `frames`."""
    half = hop // 2
    join_before = before and lo >= 1
    join_after = after and hi + 1 <= frames
    decode_from = lo - 1 if join_before else lo
    decode_to = hi + 1 if join_after else hi
    start = lo * hop - (half if join_before else 0)  # in samples of the whole latent
    stop = hi * hop + (half if join_after else 0)
    return UnitSpan(
        decode_from,
        decode_to,
        skip=start - decode_from * hop,
        emit=stop - start,
        hold=2 * half if join_after else 0,
        joins_previous=join_before,
    )


class SampleCrop:
    """Slices a stream of decoded chunks into what is emitted now and what is held."""

    def __init__(self, span: UnitSpan) -> None:
        self._emit_from = span.skip
        self._hold_from = span.skip + span.emit - span.hold
        self._end = span.skip + span.emit
        self._position = 0

    def take(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(samples to emit, samples to hold) of the next decoded chunk (views)."""
        start, self._position = self._position, self._position + len(audio)

        def part(lo: int, hi: int) -> np.ndarray:
            lo, hi = max(lo - start, 0), min(hi - start, len(audio))
            return audio[lo:hi] if hi > lo else audio[:0]

        return part(self._emit_from, self._hold_from), part(self._hold_from, self._end)


def crossfade(tail: np.ndarray, head: np.ndarray) -> np.ndarray:
    """int16 tail of one unit faded into the start of the next (raised cosine: the
    gains sum to one, right for two renderings of the same sound)."""
    n = len(tail)
    if n == 0 or len(head) < n:
        return np.concatenate([fade_out(tail), head])
    ramp = np.sin(np.linspace(0.0, np.pi / 2, n, dtype=np.float32)) ** 2
    mixed = tail[:n].astype(np.float32) * (1.0 - ramp) + head[:n].astype(np.float32) * ramp
    joined = np.clip(np.rint(mixed), -32768, 32767).astype(np.int16)
    return np.concatenate([fade_out(tail[n:]), joined, head[n:]])


def fade_out(tail: np.ndarray) -> np.ndarray:
    """A held tail no unit continues: faded, so the phrase ends without a click."""
    if len(tail) == 0:
        return tail
    ramp = np.linspace(1.0, 0.0, len(tail), dtype=np.float32)
    return np.rint(tail.astype(np.float32) * ramp).astype(np.int16)
