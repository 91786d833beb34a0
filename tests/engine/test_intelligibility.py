"""Synthesized speech is understood by an offline recognizer (and garbage is not)."""

from __future__ import annotations

import numpy as np

from ..conftest import SPEAKER_SENTENCES, write_wav


def test_ten_sentences_are_intelligible(synth, recognizer, tmp_path) -> None:
    rates = []
    for index, sentence in enumerate(SPEAKER_SENTENCES):
        wav = write_wav(tmp_path / f"s{index}.wav", synth.synthesize(sentence), 22050)
        rate, heard = recognizer.wer(wav, sentence)
        rates.append(rate)
        assert rate <= 0.5, f"{sentence!r} heard as {heard!r}"  # one slip; garbage is > 1
    assert float(np.mean(rates)) <= 0.1, rates


def test_normalized_text_is_spoken_as_words(synth, recognizer, tmp_path) -> None:
    wav = write_wav(tmp_path / "n.wav", synth.synthesize("It is 22°C at 6:30."), 22050)
    rate, heard = recognizer.wer(wav, "It is twenty two degrees Celsius at six thirty.")
    assert rate <= 0.2, heard


def test_recognizer_rejects_garbage(synth, recognizer, tmp_path) -> None:
    pcm = synth.synthesize(SPEAKER_SENTENCES[0])[::-1].copy()  # time-reversed speech
    wav = write_wav(tmp_path / "rev.wav", pcm, 22050)
    rate, _ = recognizer.wer(wav, SPEAKER_SENTENCES[0])
    assert rate > 0.5
