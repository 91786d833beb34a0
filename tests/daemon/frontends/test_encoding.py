"""The shared audio-output layer (daemon/frontends/encoding): every format decodes (with
PyAV, as a client's FFmpeg would) to audio of the length put in, at the rate asked for,
and bytes come out as chunks go in, not only at the end."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from magpie_tts.daemon.frontends.encoding import (
    FORMATS,
    AudioOutput,
    OutputError,
    WholeAudio,
    check,
    open_output,
)

SOURCE_RATE = 22050
CHUNK = 4410  # 0.2 s, about what a clause's first chunk is


def tone(seconds: float = 2.0) -> bytes:
    t = np.arange(int(SOURCE_RATE * seconds)) / SOURCE_RATE
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()


def encode(out: AudioOutput, pcm: bytes) -> list[bytes]:
    parts = [out.write(pcm[i : i + 2 * CHUNK]) for i in range(0, len(pcm), 2 * CHUNK)]
    return [*parts, out.finish()]


def decoded(fmt: str, data: bytes, rate: int) -> tuple[float, int]:
    """(seconds, the rate the file says) of `data`, decoded as a client would."""
    if fmt == "pcm":
        return len(data) / 2 / rate, rate
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        frame_rate = stream.codec_context.sample_rate
        declared = rate if fmt == "opus" else frame_rate  # Opus decodes at 48 kHz
        return samples / frame_rate, declared


@pytest.mark.parametrize("rate", [None, 16000, 48000])
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_decodes_to_the_same_length_at_the_rate_asked(fmt, rate) -> None:
    out = open_output(fmt, SOURCE_RATE, rate)
    parts = encode(out, tone(2.0))
    seconds, declared = decoded(fmt, b"".join(parts), out.rate)
    assert seconds == pytest.approx(2.0, rel=0.1)
    assert out.rate == (rate or (24000 if fmt == "opus" else SOURCE_RATE))
    assert declared == out.rate
    assert sum(1 for part in parts[:-1] if part) >= len(parts) // 2  # streamed, not at the end


def test_content_types() -> None:
    types = {fmt: open_output(fmt, SOURCE_RATE).content_type for fmt in FORMATS}
    assert types["mp3"] == "audio/mpeg" and types["wav"] == "audio/wav"
    assert types["opus"].startswith("audio/ogg") and types["aac"] == "audio/aac"


def test_a_streamed_wav_has_a_header_of_unknown_length() -> None:
    first = open_output("wav", SOURCE_RATE, 16000).write(tone(0.1))
    assert first[:4] == b"RIFF" and first[4:8] == b"\xff\xff\xff\xff"
    assert first[36:44] == b"data\xff\xff\xff\xff"
    assert int.from_bytes(first[24:28], "little") == 16000


def test_no_audio_still_makes_a_valid_end() -> None:
    for fmt in FORMATS:
        assert isinstance(open_output(fmt, SOURCE_RATE).finish(), bytes)


@pytest.mark.parametrize(
    ("fmt", "rate", "field"),
    [
        ("ogg", None, "format"),
        (None, None, "format"),
        ("wav", 7999, "sample_rate"),
        ("wav", 48001, "sample_rate"),
        ("wav", 16000.0, "sample_rate"),
        ("pcm", True, "sample_rate"),
        ("opus", 22050, "sample_rate"),  # Opus: 8, 12, 16, 24 or 48 kHz
        ("mp3", 10000, "sample_rate"),  # MPEG audio's own table of rates
    ],
)
def test_a_format_or_rate_it_cannot_make_names_the_field(fmt, rate, field) -> None:
    with pytest.raises(OutputError) as caught:
        check(fmt, rate)
    assert caught.value.field == field and isinstance(caught.value, ValueError)
    assert caught.value.message("response_format").startswith('"response_format"')
    with pytest.raises(OutputError):
        open_output(fmt, SOURCE_RATE, rate)


def test_any_rate_in_range_for_lossless_formats() -> None:
    for fmt in ("flac", "wav", "pcm"):
        assert open_output(fmt, SOURCE_RATE, 11111).rate == 11111


def test_a_whole_file_keeps_its_audio_up_to_its_limit_and_no_further() -> None:
    """HTTP's whole files and gRPC's Synthesize: encoded as it comes, at most max_s."""
    whole, out = WholeAudio(max_s=1.0), open_output("flac", SOURCE_RATE, None)
    chunk = np.frombuffer(tone(0.4), dtype="<i2")
    assert whole.keep(out, chunk, SOURCE_RATE) and whole.keep(out, chunk, SOURCE_RATE)
    kept = bytes(whole.data)
    assert whole.audio_s == pytest.approx(0.8)
    assert not whole.keep(out, chunk, SOURCE_RATE)  # 1.2 s: over the limit, not kept
    assert whole.audio_s == pytest.approx(0.8) and bytes(whole.data) == kept
    seconds, _ = decoded("flac", bytes(whole.data) + out.finish(), SOURCE_RATE)
    assert seconds == pytest.approx(0.8, abs=0.01)
