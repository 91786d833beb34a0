"""One audio-output layer for every network frontend (HTTP, its WebSocket, gRPC): the
voice's 16-bit PCM in, the format and sample rate a client asked for out, encoded as
the chunks are made (never at the end), so first bytes leave as early as the audio.

    check(fmt, rate)                      → raises OutputError (before admission)
    out = open_output(fmt, source_rate, rate)
    out.write(pcm_s16le) → bytes ready now (possibly b"")
    out.finish()         → the encoder's and resampler's tail
    out.content_type, out.rate
    WholeAudio(max_s).keep(out, pcm, rate)  → a whole file's audio, at most max_s of it

Codecs and containers are FFmpeg's (PyAV): libmp3lame mp3, libopus in Ogg, AAC in
ADTS, FLAC; the rate is changed by `soxr.ResampleStream`. WAV is the one header this
layer writes itself (44 bytes, sizes unknown while streaming), PCM has none.
"""

from .formats import CONTENT_TYPES, FORMATS, MAX_RATE, MIN_RATE, OutputError, check, output_rate
from .output import AudioOutput, open_output, wav_header
from .whole import WholeAudio

__all__ = [
    "CONTENT_TYPES",
    "FORMATS",
    "MAX_RATE",
    "MIN_RATE",
    "AudioOutput",
    "OutputError",
    "WholeAudio",
    "check",
    "open_output",
    "output_rate",
    "wav_header",
]
