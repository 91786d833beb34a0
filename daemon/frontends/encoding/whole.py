"""A whole file's audio: encoded as it comes and kept until the end, at most so many
seconds of it (a file too long to hold is refused; the streamed forms are not). HTTP's
whole-file responses and gRPC's `Synthesize` keep their audio here and each answer an
over-long request with its own status (413, INVALID_ARGUMENT)."""

from __future__ import annotations

import numpy as np

from .output import AudioOutput


class WholeAudio:
    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self.audio_s = 0.0  # the audio kept so far
        self.data = bytearray()  # its encoded bytes: one buffer, sent in pieces

    def keep(self, output: AudioOutput, pcm: np.ndarray, rate: int) -> bool:
        """Encode and keep a chunk; False (nothing kept) where it would take the file
        past `max_s`: the caller refuses the request and ends its synthesis."""
        if self.audio_s + len(pcm) / rate > self.max_s:
            return False
        self.audio_s += len(pcm) / rate
        self.data += output.write(pcm.astype("<i2").tobytes())
        return True
