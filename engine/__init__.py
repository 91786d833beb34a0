"""Magpie TTS engine: text → phonemes → latent → streamed audio chunks.

The engine knows nothing of MQTT, ALSA or systemd; the daemon drives it.
"""

from .errors import EngineError, TextError, VoiceError
from .synth import AudioChunk, StopToken, StreamingSynthesizer, SynthesisOptions
from .voice import Voice, load_voice

__all__ = [
    "AudioChunk",
    "EngineError",
    "StopToken",
    "StreamingSynthesizer",
    "SynthesisOptions",
    "TextError",
    "Voice",
    "VoiceError",
    "load_voice",
]
