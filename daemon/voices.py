"""Engine instances built from the configuration: the default voice plus voices by name."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from magpie_tts.engine import (
    CacheConfig,
    EngineConfig,
    RuntimeConfig,
    StreamingSynthesizer,
    TextPolicy,
    VoiceError,
    VoiceSummary,
    load_voice,
    summarize_voice,
    use_shared_thread_pool,
)

from .config import Config

log = logging.getLogger(__name__)


def text_policy(config: Config) -> TextPolicy:
    return TextPolicy(
        max_chars=config.limits.max_text_chars,
        max_clause_words=config.engine.max_clause_words,
        first_clause_words=config.engine.first_clause_words,
    )


def engine_config(config: Config) -> EngineConfig:
    """The one place the daemon's configuration becomes the engine's (daemon, prepare,
    bench, say and selftest all build theirs here)."""
    section = config.engine
    return EngineConfig(
        cache_dir=section.state_dir,
        runtime=RuntimeConfig(
            provider=section.provider,
            intra_op_threads=section.threads,
            gpu_mem_limit_mb=section.gpu_mem_limit_mb,
            device_id=section.device_id,
            trt_cache_dir=section.state_dir / "trt",
        ),
        precision=section.int8,
        schedule=section.schedule,
        context=section.context_frames,
        workers=section.workers,
        windowed_flow=section.windowed_flow,
        seed=section.seed,
        text=text_policy(config),
        cache=CacheConfig(
            memory_bytes=int(section.cache_mb * 1024 * 1024),
            disk=section.cache_disk,
            repeats=section.cache_repeats,
            window_s=section.cache_window_s,
            hot_phrases=section.hot_phrases,
        ),
    )


class VoiceRegistry:
    """Holds warm synthesizers: the default voice (`load`), other voices loaded on first
    use; each stays warm."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._engine_config = engine_config(config)
        self._lock = threading.Lock()
        self._by_key: dict[str, StreamingSynthesizer] = {}
        self._default: StreamingSynthesizer | None = None

    def load(self) -> StreamingSynthesizer:
        """Load and warm the default voice (seconds; minutes for a first TensorRT build)."""
        if self._default is None:
            if self.config.engine.workers == 0:  # sessions run one at a time: one spinning pool
                use_shared_thread_pool(self.config.engine.threads)
            voice = load_voice(self.config.engine.voice)
            self._default = StreamingSynthesizer(voice, self._engine_config)
        return self._default

    @property
    def loaded(self) -> bool:
        return self._default is not None

    @property
    def default(self) -> StreamingSynthesizer:
        if self._default is None:
            raise VoiceError("the default voice is not loaded yet")
        return self._default

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

    def catalogue(self) -> list[VoiceSummary]:
        """Every voice a request can name: the default, then `engine.voices_dir`'s."""
        default = self.default.voice
        voices = [summarize_voice(default.model_path)]
        directory = self.config.engine.voices_dir
        if directory is not None and directory.is_dir():
            for model in sorted(directory.glob("*.onnx")):
                if model.resolve() == default.model_path.resolve():
                    continue
                try:
                    voices.append(summarize_voice(model))
                except VoiceError as exc:
                    log.warning("voice %s not listed: %s", model, exc)
        return voices

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
