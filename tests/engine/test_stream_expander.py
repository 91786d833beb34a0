"""The expander on the INT8 decoder's output: hiss in pauses gated, speech untouched,
streaming equal to the whole, and the synthesizer applies it in time order."""

from __future__ import annotations

import itertools

import numpy as np
from magpie_tts.engine import SynthesisOptions
from magpie_tts.engine.int8.measures import log_mel, log_mel_distance, pause_floor_dbfs
from magpie_tts.engine.stream.expander import (
    BLOCK,
    FLOOR_DB,
    RATIO,
    RELEASE_S,
    THRESHOLD_DBFS,
    Expander,
)

RATE = 22050
QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)


def _level_dbfs(audio: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))))


def _speech_pause_speech(hiss_dbfs: float) -> np.ndarray:
    rng = np.random.default_rng(3)
    t = np.arange(RATE // 2) / RATE
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)  # a syllable rate, never silent
    voiced = (0.3 * np.sin(2 * np.pi * 180 * t) * envelope).astype(np.float32)
    hiss = rng.normal(0, 10 ** (hiss_dbfs / 20), RATE).astype(np.float32)
    return np.concatenate([voiced + hiss[: len(voiced)], hiss, voiced])


def test_hiss_in_a_pause_is_gated_and_speech_passes_unchanged() -> None:
    audio = _speech_pause_speech(-62.0)
    out = Expander(RATE)(audio)
    pause = slice(RATE // 2 + int(2 * RELEASE_S * RATE), RATE // 2 + RATE)
    assert _level_dbfs(audio[pause]) > -63
    expected = -62 + max(FLOOR_DB, (-62 - THRESHOLD_DBFS) * (RATIO - 1))  # -86 dBFS
    assert abs(_level_dbfs(out[pause]) - expected) < 2
    # Loud blocks keep gain 1 exactly; the block where speech resumes ramps up in one block.
    resumed = RATE // 2 + RATE + 2 * BLOCK
    assert np.array_equal(out[resumed:], audio[resumed:])
    assert np.array_equal(out[: RATE // 4], audio[: RATE // 4])


def test_a_pause_fades_over_the_release_instead_of_chopping() -> None:
    audio = _speech_pause_speech(-62.0)
    out = Expander(RATE)(audio)
    end = RATE // 2
    soon = slice(end + BLOCK, end + 3 * BLOCK)  # ~6 ms after speech stops
    later = slice(end + int(RELEASE_S * RATE), end + int(1.5 * RELEASE_S * RATE))
    assert _level_dbfs(out[soon]) > _level_dbfs(audio[soon]) - 10
    assert _level_dbfs(out[later]) < _level_dbfs(audio[later]) - 20


def test_level_above_the_threshold_is_not_touched() -> None:
    audio = _speech_pause_speech(THRESHOLD_DBFS + 6)
    assert np.array_equal(Expander(RATE)(audio), audio)


def test_chunks_of_whole_blocks_give_the_whole_output() -> None:
    audio = _speech_pause_speech(-62.0)
    whole = Expander(RATE)(audio)
    expander = Expander(RATE)
    cuts = [0, 3 * BLOCK, 40 * BLOCK, 41 * BLOCK, 300 * BLOCK, len(audio)]
    chunked = np.concatenate([expander(audio[a:b]) for a, b in itertools.pairwise(cuts)])
    assert np.array_equal(chunked, whole)
    pcm = (audio * 32767).astype(np.int16)
    gated = Expander(RATE)(pcm)
    assert gated.dtype == np.int16 and len(gated) == len(pcm)


def test_real_speech_is_almost_unchanged_and_its_pauses_stay_quiet(synth) -> None:
    pcm = synth.synthesize("Good evening. The front door is locked, and the lights are off.")
    audio = pcm.astype(np.float32) / 32767
    out = Expander(RATE)(audio)
    reference, gated = log_mel(audio, RATE), log_mel(out, RATE)
    speech = reference.max(axis=1) > reference.max() - 40  # frames within 40 dB of the peak
    assert np.mean(np.abs(reference[speech] - gated[speech])) < 0.25  # 0.11 measured
    assert log_mel_distance(audio, out, RATE) < 1.5  # the rest: what was near silence
    assert pause_floor_dbfs(out, RATE) <= pause_floor_dbfs(audio, RATE)
    noisy = audio + np.random.default_rng(5).normal(0, 10 ** (-62 / 20), len(audio))
    assert pause_floor_dbfs(Expander(RATE)(noisy.astype(np.float32)), RATE) < -75


def test_the_synthesizer_expands_its_stream_in_time_order(synth) -> None:
    text = "Turn on the lights. Then lock the front door."
    plain = synth.synthesize(text, QUIET)
    synth.expands = True
    try:
        chunks = list(synth.stream(text, QUIET))
    finally:
        synth.expands = False
    assert all(len(c.pcm) % BLOCK == 0 for c in chunks[:-1])
    streamed = np.concatenate([c.pcm for c in chunks])
    assert np.array_equal(streamed, Expander(RATE)(plain))
    assert not np.array_equal(streamed, plain)  # its pauses were gated
