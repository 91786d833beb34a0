"""Small WAV helpers shared by the CLI tools."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


def write_wav(path: Path, pcm: np.ndarray, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(sample_rate)
        handle.writeframes(pcm.astype("<i2").tobytes())
