"""The fields of a `SynthesizeSpeechRequest`: each is honoured or refused with
INVALID_ARGUMENT and a message that names it (docs/api-grpc.md lists them).

Honoured: `text`, `language_code` (checked against the voice), `voice_name` (names.py),
`encoding` (LINEAR_PCM: raw s16le mono; OGGOPUS: Ogg Opus), `sample_rate_hz` (0: the
voice's own), `custom_dictionary` (Riva's `word  IPA` entries, comma-separated: checked by
the core, which names a bad entry), `enable_word_time_offsets` (`meta.words`), `id`
(echoed). Refused when set: other encodings, `zero_shot_data`, `custom_configuration`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from magpie_tts.engine import VoiceSummary

from ..encoding import MAX_RATE, MIN_RATE, OutputError, check
from ..encoding.formats import codec_rates
from .names import Choice, resolve
from .status import RpcError
from .stubs import stubs

ENCODINGS = {"LINEAR_PCM": "pcm", "OGGOPUS": "opus"}  # what Riva's own TTS serves
MAX_ID_CHARS = 128  # as HTTP and MQTT
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@dataclass(frozen=True)
class Settings:
    """What one call asked for, checked (a SynthesizeOnline stream: its first request's)."""

    choice: Choice
    fmt: str  # an encoding-layer format: pcm | opus
    rate: int | None  # None: the voice's own
    word_offsets: bool = False
    custom_dictionary: str = ""
    same_as: tuple[Any, ...] = ()  # the raw fields a stream's later requests must repeat


def bad(message: str, kind: str = "bad_request") -> RpcError:
    return RpcError(INVALID, message, kind)


def settings(request: Any, catalogue: Iterable[VoiceSummary]) -> Settings:
    """The request's fields, checked; RpcError (INVALID_ARGUMENT) for the first wrong one."""
    fmt = _encoding(request.encoding)
    rate = _rate(fmt, request.sample_rate_hz)
    if request.HasField("zero_shot_data"):
        raise bad("zero_shot_data is not supported: Magpie speaks with its own voices")
    if len(request.custom_configuration):
        raise bad("custom_configuration is not supported")
    if request.HasField("id") and not 0 < len(request.id.value) <= MAX_ID_CHARS:
        raise bad(f"id.value must be 1..{MAX_ID_CHARS} characters")
    choice = resolve(catalogue, request.voice_name, request.language_code)
    return Settings(
        choice,
        fmt,
        rate,
        word_offsets=request.enable_word_time_offsets,
        custom_dictionary=request.custom_dictionary,
        same_as=same_as(request),
    )


def same_as(request: Any) -> tuple[Any, ...]:
    """What every request of one SynthesizeOnline stream must carry alike (the 2.27+
    client sends its first request again with each piece of text)."""
    return (
        request.voice_name,
        request.language_code,
        request.encoding,
        request.sample_rate_hz,
        request.custom_dictionary,
        request.enable_word_time_offsets,
    )


def _encoding(value: int) -> str:
    encoding = stubs().AudioEncoding
    name = encoding.Name(value) if value in encoding.values() else str(value)
    if name not in ENCODINGS:
        raise bad(f"encoding {name} is not supported: LINEAR_PCM or OGGOPUS", "unsupported_format")
    return ENCODINGS[name]


def _rate(fmt: str, hz: int) -> int | None:
    """The rate to make: 0 is the voice's own; Opus carries 8, 12, 16, 24 and 48 kHz
    only, so another rate is made at the next of those above it (22050 → 24000: the
    client's default rate, and every Opus decoder resamples to what it plays anyway)."""
    if hz == 0:
        return None
    if not MIN_RATE <= hz <= MAX_RATE:
        raise bad(f"sample_rate_hz must be 0 (the voice's own) or {MIN_RATE}..{MAX_RATE} Hz")
    allowed = codec_rates(fmt)
    if allowed is not None and hz not in allowed:
        hz = min(r for r in allowed if r >= hz)
    try:
        check(fmt, hz)
    except OutputError as exc:  # (cannot happen after the above; said clearly if it does)
        raise bad(exc.message("sample_rate_hz")) from None
    return hz
