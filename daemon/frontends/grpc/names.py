"""Voice names as Riva clients spell them, and the voice list GetRivaSynthesisConfig gives.

Riva lists each model with `parameters["voice_name"]` and `parameters["subvoices"]`
(`"Name:0,Other:1"`), and its clients name a voice as `voice_name + "." + subvoice`
(NVIDIA's talk.py `--list-voices` builds them so). Magpie's voices get the same shape:

- a one-speaker voice: `voice_name` `Magpie.EN-US`, subvoice its short name (`Joe` for
  `en_US-joe-medium`): `Magpie.EN-US.Joe`;
- a multi-speaker voice: `voice_name` `Magpie.EN-US.Libritts`, one subvoice per speaker:
  `Magpie.EN-US.Libritts.p123` (that speaker), or `Magpie.EN-US.Libritts` (its first).

A request may also name a voice as the catalogue does (`en_US-joe-medium`, `default`),
or leave `voice_name` empty: the default voice, or the first that speaks
`language_code`. Riva-style names are matched without regard to case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import grpc
from magpie_tts.daemon.voices import DEFAULT_ALIAS, unknown_voice
from magpie_tts.engine import VoiceSummary

from .status import RpcError

PREFIX = "Magpie"
_PIPER_NAME = re.compile(r"[a-z]{2,3}(?:_[A-Za-z]{2,3})?-(?P<short>.+)-[a-z_]+")


def language_tag(language: str) -> str:
    """A voice's language as a BCP-47 tag (`en_US` → `en-US`)."""
    return language.replace("_", "-")


def short_name(summary: VoiceSummary) -> str:
    """`en_US-joe-medium` → `Joe`; a name of another shape is used whole."""
    match = _PIPER_NAME.fullmatch(summary.name)
    short = match.group("short") if match else summary.name
    return short[:1].upper() + short[1:]


def model_voice_name(summary: VoiceSummary) -> str:
    lang = language_tag(summary.language).upper()
    if summary.speakers:
        return f"{PREFIX}.{lang}.{short_name(summary)}"
    return f"{PREFIX}.{lang}"


def subvoices(summary: VoiceSummary) -> list[str]:
    return list(summary.speakers) if summary.speakers else [short_name(summary)]


def riva_names(summary: VoiceSummary) -> list[str]:
    """Every Riva-style full name of a voice."""
    base = model_voice_name(summary)
    return [f"{base}.{sub}" for sub in subvoices(summary)]


def speaks(summary: VoiceSummary, language_code: str) -> bool:
    """Whether the voice speaks `language_code` (`en-US`, `en_US`, or just `en`)."""
    asked = language_code.lower().replace("_", "-")
    own = language_tag(summary.language).lower()
    return asked in (own, own.split("-")[0])


@dataclass(frozen=True)
class Choice:
    """The voice a request names: its catalogue name (None: the default) and speaker."""

    summary: VoiceSummary
    voice: str | None
    speaker: str | None = None


def resolve(catalogue: Iterable[VoiceSummary], name: str, language_code: str) -> Choice:
    """The voice `name` names, checked against `language_code`; RpcError otherwise."""
    voices = list(catalogue)  # the default voice first
    if not voices:
        raise RpcError(grpc.StatusCode.UNAVAILABLE, "no voice is loaded", "loading")
    default = voices[0]
    if not name or name == DEFAULT_ALIAS:
        if not language_code or speaks(default, language_code):
            return Choice(default, None)
        for summary in voices:
            if speaks(summary, language_code):
                return Choice(summary, summary.name)
        raise RpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"no voice speaks {language_code[:20]!r}",
            "unknown-voice",
        )
    choice = _by_name(voices, name)
    if language_code and not speaks(choice.summary, language_code):
        raise RpcError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"voice {name!r} speaks {language_tag(choice.summary.language)}, "
            f"not {language_code[:20]!r}",
            "bad_request",
        )
    return choice


def _by_name(voices: list[VoiceSummary], name: str) -> Choice:
    for summary in voices:
        if summary.name == name:
            return Choice(summary, None if summary is voices[0] else summary.name)
    wanted = name.lower()
    for summary in voices:
        voice = None if summary is voices[0] else summary.name
        if summary.speakers and wanted == model_voice_name(summary).lower():
            return Choice(summary, voice)  # a multi-speaker voice alone: its first speaker
        for full, sub in zip(riva_names(summary), subvoices(summary), strict=True):
            if wanted == full.lower():
                return Choice(summary, voice, sub if summary.speakers else None)
    raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, str(unknown_voice(name)), "unknown-voice")
