"""Word timings from the frontend's own phoneme durations.

The frontend predicts how many latent frames each phoneme id lasts (after the speed, so
SSML rates are in them); a word's ids are those between two spaces of the phonemes, so
its start and end are frame sums × hop. A unit's words are timed relative to the first
sample of the unit's own audio; the stream adds the audio delivered before it (units.py).
Where no durations are at hand (a phrase-cache hit from disk, a runaway unit cut into
parts, espeak giving a different word count) the words are spread over the audio in
proportion to their letters.
"""

from __future__ import annotations

import string

import numpy as np

from ..text.segment import Prosody, spoken_words
from ..values import WordTime

_PUNCTUATION = string.punctuation + "\u2026\u201c\u201d\u2018\u2019"


def shown_words(unit: str) -> list[str]:
    """The unit's words as a caption shows them: punctuation off, a [[ block ]] as its
    symbols, punctuation-only tokens dropped."""
    words = []
    for word in spoken_words(unit):
        if word.startswith("[["):
            words.append(word[2:-2].strip())
        elif stripped := word.strip(_PUNCTUATION):
            words.append(stripped)
    return words


def from_durations(
    words: list[str],
    spans: list[tuple[int, int]],
    durations: np.ndarray,
    first_id: int,
    origin: float,
    seconds_per_frame: float,
    sizes: list[int] | None = None,
) -> list[WordTime]:
    """Times of `words` whose ids are `spans` (offsets from `first_id` in the frontend's
    ids); `origin`: the frame where the unit's audio starts (may be fractional);
    `sizes`: each word's phonemes said alone (else its letters), to align them."""
    if not spans or not words:
        return spread(words, 0.0, 0.0)
    frames = np.concatenate([[0], np.cumsum(durations)]).astype(np.float64)

    def at(position: float) -> float:  # seconds at a (fractional) id offset
        index = first_id + position
        return (float(np.interp(index, np.arange(len(frames)), frames)) - origin) * (
            seconds_per_frame
        )

    ranges = align(words, spans, sizes)
    return [WordTime(w, at(lo), at(hi)) for w, (lo, hi) in zip(words, ranges, strict=True)]


def align(
    words: list[str], spans: list[tuple[int, int]], sizes: list[int] | None = None
) -> list[tuple[float, float]]:
    """Each word's id range. espeak-ng may join words ("on the" is one) or split one
    ("twenty-four"): the words are laid over the spoken ids in proportion to their
    phonemes (or letters), and each boundary snaps to a boundary between spans within
    half a word."""
    if len(words) == len(spans):
        return [(float(lo), float(hi)) for lo, hi in spans]
    weights = np.array(sizes or [len(w) for w in words], dtype=np.float64).clip(1, None)
    cuts = np.concatenate([[0], np.cumsum(weights)]) / weights.sum()
    lengths = np.array([hi - lo for lo, hi in spans], dtype=np.float64)
    ends = np.cumsum(lengths) / lengths.sum()  # each span's end, as a fraction of speech

    def position(fraction: float) -> float:  # a fraction of speech as an id offset
        j = min(int(np.searchsorted(ends, fraction)), len(spans) - 1)
        before = ends[j - 1] if j else 0.0
        inside = (fraction - before) / max(ends[j] - before, 1e-9)
        return spans[j][0] + inside * lengths[j]

    bounds: list[tuple[float, float]] = [(float(spans[0][0]), 0.0)]
    for i in range(1, len(words)):
        half = 0.5 * min(weights[i - 1], weights[i]) / weights.sum()
        j = int(np.argmin(np.abs(ends[:-1] - cuts[i]))) if len(spans) > 1 else -1
        if j >= 0 and abs(ends[j] - cuts[i]) <= half:
            bounds.append((float(spans[j + 1][0]), float(spans[j][1])))  # (start, end before)
        else:
            bounds.append((position(cuts[i]),) * 2)
    bounds.append((0.0, float(spans[-1][1])))
    return [(bounds[i][0], bounds[i + 1][1]) for i in range(len(words))]


def spread(words: list[str], start: float, end: float) -> list[WordTime]:
    """Words over [start, end] in proportion to their letters (no durations at hand)."""
    weights = np.array([max(len(w), 1) for w in words], dtype=np.float64)
    edges = start + (end - start) * np.concatenate([[0], np.cumsum(weights)]) / max(
        weights.sum(), 1.0
    )
    return [WordTime(w, float(edges[i]), float(edges[i + 1])) for i, w in enumerate(words)]


def with_marks(words: list[WordTime], prosody: Prosody, end: float) -> list[WordTime]:
    """The unit's SSML marks among its words: a mark before word i sounds at its start
    (after the last word: at the end of the last word, or `end`)."""
    if not prosody.marks:
        return words
    timed = list(words)
    for index, name in reversed(sorted(prosody.marks, key=lambda m: m[0])):
        last = words[-1].end if words else end
        at = words[index].start if index < len(words) else last
        timed.insert(min(index, len(words)), WordTime(name, at, at, "mark"))
    return timed
