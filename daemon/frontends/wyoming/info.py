"""The `info` event: what Home Assistant shows of the server, its program and voices."""

from __future__ import annotations

from magpie_tts.engine import VoiceSummary
from wyoming.info import Attribution, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker

ATTRIBUTION = Attribution(name="Magpie TTS", url="https://github.com/magpie-tts/magpie-tts")
PIPER_ATTRIBUTION = Attribution(name="Piper voices", url="https://github.com/rhasspy/piper")


def build_info(voices: list[VoiceSummary], version: str) -> Info:
    return Info(
        tts=[
            TtsProgram(
                name="magpie-tts",
                attribution=ATTRIBUTION,
                installed=True,
                description="Magpie TTS: on-device streaming neural speech",
                version=version,
                supports_synthesize_streaming=True,
                voices=[
                    TtsVoice(
                        name=voice.name,
                        attribution=PIPER_ATTRIBUTION,
                        installed=True,
                        description=f"{voice.name} ({voice.language}"
                        + (f", {voice.quality})" if voice.quality else ")"),
                        version=None,
                        languages=[voice.language],
                        speakers=[TtsVoiceSpeaker(name=s) for s in voice.speakers] or None,
                    )
                    for voice in voices
                ],
            )
        ]
    )
