"""Engine instances built from the configuration: the default voice plus voices by name."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from magpie_tts.engine import StreamingSynthesizer, VoiceError, load_voice
from magpie_tts.engine.runtime import RuntimeConfig
from magpie_tts.engine.synth import EngineConfig

from .config import Config

log = logging.getLogger(__name__)


def engine_config(config: Config) -> EngineConfig:
    section = config.engine
    return EngineConfig(
        cache_dir=section.state_dir,
        runtime=RuntimeConfig(
            provider=section.provider,
            intra_op_threads=section.threads,
            gpu_mem_limit_mb=section.gpu_mem_limit_mb,
            trt_cache_dir=section.state_dir / "trt",
        ),
        precision=section.int8,
        schedule=section.schedule,
        context=section.context_frames,
        max_clause_words=section.max_clause_words,
        first_clause_words=section.first_clause_words,
        max_text_chars=config.limits.max_text_bytes,
        phrase_cache_bytes=int(section.cache_mb * 1024 * 1024),
    )


class VoiceRegistry:
    """Holds warm synthesizers; other voices load on first use and stay warm."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._engine_config = engine_config(config)
        self._lock = threading.Lock()
        self.default = StreamingSynthesizer(load_voice(config.engine.voice), self._engine_config)
        self._by_key: dict[str, StreamingSynthesizer] = {}

    def get(self, name: str | None) -> StreamingSynthesizer:
        if not name:
            return self.default
        path = self._resolve(name)
        key = str(path)
        with self._lock:
            synth = self._by_key.get(key)
            if synth is None:
                log.info("loading voice %s", path)
                synth = StreamingSynthesizer(load_voice(path), self._engine_config)
                self._by_key[key] = synth
            return synth

    def check(self, name: str | None) -> StreamingSynthesizer | None:
        """Raise VoiceError now for a voice that cannot be found (before queueing); the
        synthesizer when it is already loaded."""
        if not name:
            return self.default
        key = str(self._resolve(name))
        with self._lock:
            if key == str(self.default.voice.model_path):
                return self.default
            return self._by_key.get(key)

    def _resolve(self, name: str) -> Path:
        if name in (self.default.voice.name, "default"):
            return self.default.voice.model_path
        directory = self.config.engine.voices_dir
        if "/" not in name and directory is not None:
            candidate = directory / (name if name.endswith(".onnx") else f"{name}.onnx")
            if candidate.is_file():
                return candidate
        path = Path(name).expanduser()
        if path.is_absolute() and path.is_file():
            return path
        raise VoiceError(f"unknown voice {name!r}")
