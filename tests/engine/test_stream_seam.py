"""The seam after a first unit cut mid-sentence: no inserted pause, no click (real voice)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from magpie_tts.engine import SynthesisOptions
from magpie_tts.engine.stream.seam import SampleCrop, crossfade, fade_out, unit_span
from magpie_tts.engine.text.segment import Unit

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
# Long first sentences without a comma: the first unit is cut between two words.
CUT_SENTENCES = [
    "Tomorrow will be mostly cloudy with a chance of showers in the afternoon and a high of "
    "twelve degrees.",
    "Your package from the hardware store arrived at the front door about ten minutes ago and "
    "is waiting for you.",
    "The meeting with the design team has been moved to Thursday morning because the "
    "conference room is booked.",
    "Please turn off the lights in the kitchen and lock the back door before you go to bed "
    "tonight.",
]
FRAME_S = 0.01
ALLOWED_EXTRA_MS = 30


def pause_ms(pcm: np.ndarray, rate: int, at: int) -> int:
    """Longest run of quiet 10 ms frames touching sample `at` (quiet: 35 dB under the
    90th-percentile frame level of the whole utterance)."""
    size = int(FRAME_S * rate)
    frames = pcm[: len(pcm) // size * size].astype(np.float64).reshape(-1, size)
    level = 20 * np.log10(np.sqrt((frames**2).mean(axis=1)) + 1e-9)
    quiet = level < np.percentile(level, 90) - 35
    centre = at // size
    lo = hi = None
    for index in range(max(0, centre - 5), min(len(quiet), centre + 6)):
        if quiet[index]:
            lo = hi = index
            break
    if lo is None:
        return 0
    while lo > 0 and quiet[lo - 1]:
        lo -= 1
    while hi + 1 < len(quiet) and quiet[hi + 1]:
        hi += 1
    return int((hi - lo + 1) * FRAME_S * 1000)


def whole_sentence_pause(synth, sentence: str, first_unit: str) -> int:
    """The pause whole-sentence synthesis puts where the first unit's words end."""
    phonemizer = synth.phonemizer
    ids, _, _ = phonemizer.ids_in_context(sentence, "", "")
    unit_phonemes = phonemizer.phonemes(first_unit)
    assert phonemizer.phonemes(sentence)[: len(unit_phonemes)] == unit_phonemes
    unit_ids = len(phonemizer.ids_in_context(first_unit, "", "")[0]) - 1  # without EOS
    _, durations = synth.latent_and_durations(ids, QUIET)
    whole = np.concatenate([c.pcm for c in synth.stream_clauses([Unit(sentence)], QUIET)])
    return pause_ms(whole, synth.voice.sample_rate, int(durations[:unit_ids].sum()) * 256)


def spoken(synth, units: list[str]) -> tuple[np.ndarray, int]:
    """Audio of the units in one utterance, and the sample where the first one ends."""
    chunks = list(synth.stream_clauses(units, QUIET, cache_use="bypass"))
    cut = sum(len(c.pcm) for c in chunks if c.clause_index == 0)
    return np.concatenate([c.pcm for c in chunks]), cut


@pytest.mark.parametrize("sentence", CUT_SENTENCES)
def test_no_pause_is_inserted_where_a_long_first_sentence_is_cut(synth, sentence: str) -> None:
    units = synth.clauses(sentence)
    assert len(units) == 2 and units[0].after and units[1].before  # cut mid-sentence
    whole = whole_sentence_pause(synth, sentence, units[0])
    rate = synth.voice.sample_rate
    audio, cut = spoken(synth, units)
    assert pause_ms(audio, rate, cut) <= whole + ALLOWED_EXTRA_MS, sentence
    # The measure does catch a seam: the same units spoken alone (no context) pause there.
    alone, alone_cut = spoken(synth, [Unit(str(u)) for u in units])
    assert pause_ms(alone, rate, alone_cut) > whole + ALLOWED_EXTRA_MS


def test_crossfade_of_two_renderings_of_one_sound_is_that_sound() -> None:
    """The gains sum to one: where both sides agree the join is seamless; a held tail
    with nothing to join is faded to silence."""
    rng = np.random.default_rng(7)
    sound = (rng.standard_normal(1024) * 8000).astype(np.int16)
    joined = crossfade(sound[:256], sound)
    assert len(joined) == len(sound)
    assert np.abs(joined.astype(int) - sound).max() <= 1
    assert fade_out(sound[:256])[-1] == 0
    assert np.array_equal(crossfade(sound[:256], sound[:10])[-10:], sound[:10])


def test_a_cut_unit_whose_continuation_never_comes_ends_faded(synth) -> None:
    """A stream that ends after the cut unit (a text stream gone idle) still ends cleanly."""
    first = synth.clauses(CUT_SENTENCES[1])[0]
    chunks = list(synth.stream_clauses([first], QUIET, cache_use="bypass"))
    audio = np.concatenate([c.pcm for c in chunks])
    assert abs(int(audio[-1])) <= 64  # faded to silence, no step at the end
    assert audio.size > 0.5 * synth.voice.sample_rate


def test_cut_sentences_stay_intelligible(synth, recognizer) -> None:
    errors = []
    for sentence in CUT_SENTENCES:
        pcm = np.concatenate([c.pcm for c in synth.stream(sentence)])
        wer, _heard = recognizer.wer_pcm(pcm, synth.voice.sample_rate, sentence)
        errors.append(wer)
    assert np.mean(errors) <= 0.1, errors


@settings(max_examples=200, deadline=None)
@given(
    frames=st.integers(4, 400),
    bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    before=st.booleans(),
    after=st.booleans(),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
)
def test_sample_crop_emits_exactly_the_units_samples_and_holds_its_tail(
    frames: int, bounds: tuple[float, float], before: bool, after: bool, sizes: list[int]
) -> None:
    hop = 256
    lo, hi = sorted(int(b * (frames - 1)) for b in bounds)
    hi = max(hi, lo + 1)
    span = unit_span(frames, lo, hi, hop, before, after)
    decoded = np.arange(span.decode_from * hop, span.decode_to * hop)  # sample numbers
    crop, emitted, held, position = SampleCrop(span), [], [], 0
    for size in [*sizes, len(decoded)]:
        emit, hold = crop.take(decoded[position : position + size])
        emitted.append(emit)
        held.append(hold)
        position += size
        if position >= len(decoded):
            break
    out = np.concatenate(emitted + held)
    start = lo * hop - (hop // 2 if span.joins_previous else 0)
    stop = hi * hop + (hop // 2 if span.hold else 0)
    assert np.array_equal(out, np.arange(start, stop))  # contiguous, nothing lost or doubled
    assert sum(map(len, held)) == span.hold
