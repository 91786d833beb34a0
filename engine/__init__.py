"""Magpie TTS engine: text → units → phoneme ids → latent → streamed audio chunks.

A library: it knows nothing of MQTT, ALSA, HTTP or systemd; the daemon and the tools
drive it through the names below. Its folders, one concern each:
- `text/`: normalization, verbalization, units and the text policy, phonemes;
- `graph/`: offline ONNX rewrites (the frontend/decoder and encoder/flow splits);
- `int8/`: INT8 preparation and its quality gate (offline; import it directly);
- `stream/`: the streaming runtime (its config, a voice's sessions, the synthesizer and
  its streams' units, chunked decoder, turns, seams, cache);
- `voice.py`, `runtime.py` (onnxruntime sessions), `precision.py` (which graphs run),
  `values.py` (the value types), `errors.py`.
"""

from .errors import EngineError, TextError, VoiceError
from .graph.split import SplitGraph, split_dir, split_voice
from .precision import INT8_DECODER
from .runtime import RuntimeConfig, session_options, use_shared_thread_pool
from .stream.cache import CacheConfig, clear_directory
from .stream.config import EngineConfig
from .stream.decoder import DEFAULT_SCHEDULE
from .stream.speed import LaneSpeed, Speed, measured_speed, usable_cores
from .stream.synth import StreamingSynthesizer
from .stream.turns import CLIENT, SPEAKER
from .text.lexicon import Lexicon, LexiconError, parse_custom, unknown_symbols
from .text.policy import DEFAULT_MAX_TEXT_CHARS, TextPolicy, TextStream
from .text.segment import DEFAULT_FIRST_WORDS, DEFAULT_MAX_WORDS
from .values import AudioChunk, StageTimes, StopToken, SynthesisOptions, WordTime, to_pcm
from .voice import (
    Voice,
    VoiceSummary,
    find_voice,
    inspect_voice,
    installed_voice_models,
    load_voice,
    summarize_voice,
)

__all__ = [
    "CLIENT",
    "DEFAULT_FIRST_WORDS",
    "DEFAULT_MAX_TEXT_CHARS",
    "DEFAULT_MAX_WORDS",
    "DEFAULT_SCHEDULE",
    "INT8_DECODER",
    "SPEAKER",
    "AudioChunk",
    "CacheConfig",
    "EngineConfig",
    "EngineError",
    "LaneSpeed",
    "Lexicon",
    "LexiconError",
    "RuntimeConfig",
    "Speed",
    "SplitGraph",
    "StageTimes",
    "StopToken",
    "StreamingSynthesizer",
    "SynthesisOptions",
    "TextError",
    "TextPolicy",
    "TextStream",
    "Voice",
    "VoiceError",
    "VoiceSummary",
    "WordTime",
    "clear_directory",
    "find_voice",
    "inspect_voice",
    "installed_voice_models",
    "load_voice",
    "measured_speed",
    "parse_custom",
    "session_options",
    "split_dir",
    "split_voice",
    "summarize_voice",
    "to_pcm",
    "unknown_symbols",
    "usable_cores",
    "use_shared_thread_pool",
]
