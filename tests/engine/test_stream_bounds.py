"""Work per unit is bounded: a runaway token or unit never stalls the first audio."""

from __future__ import annotations

import numpy as np
import pytest
from magpie_tts.engine import StopToken, SynthesisOptions
from magpie_tts.engine.text.phonemize import MAX_UNIT_IDS

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)


@pytest.fixture
def frontend_calls(synth):
    """Ids per frontend call, recorded by wrapping the synthesizer's encoder run."""
    calls: list[int] = []
    prior = synth.prior
    synth.prior = lambda ids, *args, **kwargs: (
        calls.append(len(ids)),
        prior(ids, *args, **kwargs),
    )[1]
    yield calls
    del synth.prior


def test_a_normal_unit_is_one_part_with_the_same_ids(synth) -> None:
    text = "The next train to Cambridge leaves from platform four in seven minutes."
    assert synth.phonemizer.clause_id_parts(text) == [synth.phonemizer.clause_ids(text)]


def test_a_long_unit_is_cut_at_word_boundaries_under_the_cap(synth) -> None:
    words = " ".join(["window", "kitchen", "garden", "evening"] * 60)
    whole = synth.phonemizer.clause_ids(words)
    parts = synth.phonemizer.clause_id_parts(words, max_ids=120)
    assert len(whole) > 4 * 120 and len(parts) >= 4
    assert all(len(p) <= 120 for p in parts)
    space = synth.voice.phoneme_id_map[" "][0]
    for part in parts[:-1]:  # every part ends on a whole word: the next one starts fresh
        assert part[-3] != space
    # nothing is lost: the parts hold the same phonemes as the whole unit
    inner = [i for p in parts for i in p[2:-1]]
    assert len(inner) >= len(whole[2:-1]) - 2 * len(parts)


@pytest.mark.parametrize(
    "token",
    [
        "x" * 3000,
        "https://example.com/" + "a1" * 1500,
        "9f86d081884c" * 250,
        "7" * 3000,
    ],
)
def test_a_3000_character_token_is_short_speech(synth, frontend_calls, token: str) -> None:
    pcm = synth.synthesize(f"Here it is: {token}", QUIET)
    assert len(pcm) / synth.voice.sample_rate < 4.0  # was 20 s of noise
    assert max(frontend_calls) <= 80  # "link to example dot com" is 63


def test_no_frontend_call_exceeds_the_cap_even_unnormalized(synth, frontend_calls) -> None:
    """Inline phonemes and a unit handed over directly skip the normalizer: still capped."""
    stop = StopToken()
    runaway = "[[ " + "ab" * 1500 + " ]]"
    chunks = synth.stream_clauses([runaway], QUIET, stop)
    first = next(chunks)
    stop.stop()
    assert len(first.pcm) > 0 and list(chunks) == []
    assert frontend_calls == [frontend_calls[0]] and frontend_calls[0] <= MAX_UNIT_IDS

    long_unit = " ".join(["window", "kitchen", "garden", "evening"] * 150)
    frontend_calls.clear()
    stop = StopToken()
    chunks = synth.stream_clauses([long_unit], QUIET, stop)
    next(chunks)
    stop.stop()
    list(chunks)
    assert len(frontend_calls) == 1 and frontend_calls[0] <= MAX_UNIT_IDS


def test_a_capped_unit_still_speaks_all_of_it(synth, frontend_calls) -> None:
    words = " ".join(["window", "kitchen", "garden", "evening"] * 40)  # ~800 ids
    pcm = np.concatenate([c.pcm for c in synth.stream_clauses([words], QUIET)])
    assert len(frontend_calls) >= 2 and max(frontend_calls) <= MAX_UNIT_IDS
    assert len(pcm) / synth.voice.sample_rate > 160 * 0.25  # 160 words, none dropped
