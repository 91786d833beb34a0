"""An open output: PCM chunks in, encoded bytes out as soon as the codec has them.

Every encoder here writes through a muxer whose I/O is flushed after each packet
(`flush_packets`), Ogg pages are cut every 20 ms of audio instead of every second, and
mp3 has no ID3 tag or Xing frame (a stream's length is not known when it starts): what
`write` returns can go to the client at once.
"""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import soxr

from .formats import CODECS, CONTENT_TYPES, output_rate

UNKNOWN_SIZE = 0xFFFFFFFF
# Speed over the last bit of efficiency: a small board encodes every client's stream
# beside synthesis (~30 ms of CPU per second of audio with INT8). Measured on 20 s at
# 22/24 kHz: libmp3lame 5.5 → 4.1 ms of CPU per second of audio (LAME -q 5), libopus
# 6.6 → 1.9 ms (complexity 5 of 10); both still decode to clean speech (WER test).
ENCODER_OPTIONS = {
    "libmp3lame": {"compression_level": "5"},
    "libopus": {"compression_level": "5"},
}
MUXER_OPTIONS = {
    "mp3": {"id3v2_version": "0", "write_xing": "0"},
    "ogg": {"page_duration": "20000"},  # µs: a page per chunk, not per second
}


def wav_header(rate: int, data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM WAV header; data_bytes None: unknown length (a stream)."""
    size = UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff = UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", size)
    )


class AudioOutput:
    """One response's audio: `write` each PCM chunk (s16le mono at the source rate) and
    send what it returns; `finish` once at the end and send that too. Not thread-safe:
    one writer at a time (calls may come from different threads one after another)."""

    def __init__(self, fmt: str, source_rate: int, rate: int) -> None:
        self.format = fmt
        self.source_rate = source_rate
        self.rate = rate
        self.content_type = CONTENT_TYPES[fmt]
        self._resampler = (
            soxr.ResampleStream(source_rate, rate, 1, dtype="int16")
            if rate != source_rate
            else None
        )
        self._finished = False

    def write(self, pcm_s16le: bytes) -> bytes:
        """The bytes of this chunk ready now (b"" while the codec fills a frame)."""
        if self._finished:
            raise RuntimeError("audio output already finished")
        samples = np.frombuffer(pcm_s16le, dtype="<i2")
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples, last=False)
        return self._encode(samples)

    def finish(self) -> bytes:
        """The tail: the resampler's last samples and the encoder's last frames."""
        if self._finished:
            return b""
        self._finished = True
        tail = b""
        if self._resampler is not None:
            last = self._resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
            tail = self._encode(last)
        return tail + self._flush()

    def _encode(self, samples: np.ndarray) -> bytes:
        return samples.astype("<i2", copy=False).tobytes()

    def _flush(self) -> bytes:
        return b""


class WavOutput(AudioOutput):
    """PCM after a header of unknown length (RIFF and data sizes 0xFFFFFFFF)."""

    def __init__(self, fmt: str, source_rate: int, rate: int) -> None:
        super().__init__(fmt, source_rate, rate)
        self._header: bytes | None = wav_header(rate)

    def _encode(self, samples: np.ndarray) -> bytes:
        header, self._header = self._header or b"", None
        return header + super()._encode(samples)

    def _flush(self) -> bytes:
        header, self._header = self._header or b"", None  # no audio at all: still a WAV
        return header


class _Collect(io.RawIOBase):
    """Where the muxer writes: bytes kept until `take` (not seekable: a stream)."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.data += b
        return len(b)

    def take(self) -> bytes:
        out, self.data = bytes(self.data), bytearray()
        return out


class CodecOutput(AudioOutput):
    """An FFmpeg encoder and muxer (mp3, Ogg Opus, ADTS AAC, FLAC)."""

    def __init__(self, fmt: str, source_rate: int, rate: int) -> None:
        super().__init__(fmt, source_rate, rate)
        codec, muxer, bit_rate = CODECS[fmt]
        self._sink = _Collect()
        options = {"flush_packets": "1", **MUXER_OPTIONS.get(muxer, {})}
        self._container = av.open(self._sink, mode="w", format=muxer, options=options)
        stream = self._container.add_stream(codec, rate=rate, options=ENCODER_OPTIONS.get(codec))
        stream.layout = "mono"
        stream.format = av.codec.Codec(codec, "w").audio_formats[0].name
        if bit_rate is not None:
            stream.bit_rate = bit_rate
        self._stream = stream
        self._pts = 0

    def _encode(self, samples: np.ndarray) -> bytes:
        if len(samples):
            frame = av.AudioFrame.from_ndarray(
                samples.astype(np.int16, copy=False).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate = self.rate
            frame.pts = self._pts
            self._pts += len(samples)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take()

    def _flush(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()  # the muxer's trailer
        return self._sink.take()


def open_output(fmt: str, source_rate: int, rate: int | None = None) -> AudioOutput:
    """An output for `fmt` at `rate` (None: the voice's own, or the codec's nearest);
    OutputError for a format or rate it cannot make."""
    made_at = output_rate(fmt, source_rate, rate)
    if fmt in CODECS:
        return CodecOutput(fmt, source_rate, made_at)
    if fmt == "wav":
        return WavOutput(fmt, source_rate, made_at)
    return AudioOutput(fmt, source_rate, made_at)
