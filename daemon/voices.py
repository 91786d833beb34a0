"""Engine instances built from the configuration: the default voice plus voices by name.

A request names a voice; it never gives a path. The names are the catalogue's: the
default voice's (and "default"), the voices in `engine.voices_dir` by file stem, and the
installed voice packages'. A name is only a key into that table, so nothing a client
sends reaches the filesystem, and every voice a request cannot use gets the same answer.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from magpie_tts.engine import (
    CacheConfig,
    EngineConfig,
    RuntimeConfig,
    StreamingSynthesizer,
    TextPolicy,
    VoiceError,
    VoiceSummary,
    find_voice,
    inspect_voice,
    installed_voice_models,
    load_voice,
    summarize_voice,
    use_shared_thread_pool,
)

from .config import Config, resolved_workers
from .core.failover import Failover, FailoverPolicy

log = logging.getLogger(__name__)

DEFAULT_ALIAS = "default"
# What a voice's name can look like: only such a name is quoted back (never a path: no
# "/"), so the answer and the log never echo a path a client tried.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}", re.ASCII)


def unknown_voice(name: str) -> VoiceError:
    """The one answer for a voice a request cannot use: not in the catalogue, a path, a
    file that is not a voice, or one that failed to load. It depends on the name only."""
    if _NAME.fullmatch(name):
        return VoiceError(f"unknown voice {name!r}")
    return VoiceError("unknown voice: voices are named as the catalogue lists them")


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
        workers=resolved_workers(config),
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


@dataclass(frozen=True)
class _Entry:
    """A voice a request can name."""

    name: str
    summary: VoiceSummary  # its model_path: the file as listed (a symlink's own name)
    key: tuple[int, int]  # the model file itself (device, inode): one synthesizer per
    # file, however it is reached (symlink, hard link, any spelling of its path)


class VoiceRegistry:
    """Holds warm synthesizers: the default voice (`load`), and up to `engine.max_voices`
    others, loaded on first use and dropped least recently used first.

    Dropping one is safe: the registry only caches synthesizers. An utterance takes its
    synthesizer once, when it starts (core.py, speaker.py), and keeps that reference to
    its end, so a dropped voice finishes what it speaks and is freed after; the next
    request for it loads it again. Nothing else holds a synthesizer but the default
    (status, metrics, the self-test read only that one).

    Threads: `_lock` guards the tables and is never held while a voice loads, so
    admission (`check`, on the frontends' threads) never waits for a load; `_load_lock`
    lets one voice load at a time (seconds of CPU, ~80 MB each), on the thread that
    needs it (the speaker worker or a client's synthesis thread).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._engine_config = engine_config(config)
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._default: StreamingSynthesizer | None = None
        self._default_entry: _Entry | None = None
        self._loaded: OrderedDict[tuple[int, int], StreamingSynthesizer] = OrderedDict()
        self._failed: set[tuple[int, int]] = set()  # files that did not load: unknown now
        self._packages: list[Path] = []
        self._table: dict[str, _Entry] = {}
        self._stamp: tuple[int, int] | None = None  # voices_dir's (inode, mtime) when read
        self._seen: dict[tuple[str, int, int, int], _Entry | None] = {}  # inspected files
        section = config.engine
        self.failover = Failover(
            None,
            FailoverPolicy(
                section.fallback_after_failures, section.fallback_window_s, section.fallback_probe_s
            ),
        )
        self.load_problem: str | None = None  # the primary did not load: on the fallback
        self._retry_at = 0.0
        self._retrying = threading.Lock()

    def load(self) -> StreamingSynthesizer:
        """Load and warm the default voice (seconds; minutes for a first TensorRT build),
        and its fallback; read the catalogue. A default voice that does not load leaves
        the fallback in its place (degraded), or raises where there is none."""
        if self._default is None:
            if self._engine_config.workers == 0:  # sessions run one at a time: one spinning pool
                use_shared_thread_pool(self.config.engine.threads)
            try:
                synth = self._make(self.config.engine.voice, self._engine_config)
            except Exception as exc:
                if self.config.engine.fallback_voice is None:
                    if isinstance(exc, VoiceError):
                        raise
                    raise VoiceError(f"the voice did not load: {exc}") from exc
                try:
                    synth = self.failover.fallback = self._make_fallback(None)
                except Exception as also:
                    raise VoiceError(f"neither the voice ({exc}) nor its fallback loaded") from also
                self._failed_to_load(exc)
            else:
                try:
                    self.failover.fallback = self._make_fallback(synth)
                except Exception as exc:  # serve on the voice; only the safety net is gone
                    log.error("the fallback voice did not load (no fallback): %s", exc)
            self._packages = installed_voice_models()
            self._set_default(synth)
        return self._default  # type: ignore[return-value]

    def _make(self, spec: str | Path | None, config: Any) -> StreamingSynthesizer:
        return StreamingSynthesizer(load_voice(find_voice(spec) if spec else None), config)

    def _make_fallback(self, primary: StreamingSynthesizer | None) -> StreamingSynthesizer | None:
        """The fallback synthesizer: `engine.fallback_voice` on the fallback provider and
        precision; the primary's own voice there when it runs on a GPU; else none."""
        section = self.config.engine
        spec = section.fallback_voice
        if spec is None and (primary is None or primary.choice.used == "cpu"):
            return None
        config = replace(
            self._engine_config,
            runtime=replace(self._engine_config.runtime, provider=section.fallback_provider),
            precision=section.fallback_int8,
        )
        synth = self._make(spec or primary.voice.model_path, config)  # type: ignore[union-attr]
        log.info("fallback voice %s ready on %s", synth.voice.name, synth.choice.used)
        return synth

    def _set_default(self, synth: StreamingSynthesizer) -> None:
        voice = synth.voice
        info = voice.model_path.stat()
        self._default_entry = _Entry(
            voice.name, summarize_voice(voice.model_path), (info.st_dev, info.st_ino)
        )
        self._default = synth
        self._refresh(force=True)

    def _failed_to_load(self, exc: Exception) -> None:
        fallback = self.failover.fallback
        self.load_problem = (
            f"voice {self.config.engine.voice or 'default'} did not load "
            f"({type(exc).__name__}: {str(exc)[:200]}); speaking with {fallback.voice.name} "
            f"on {fallback.choice.used}"
        )
        log.error("%s; loading it again every %.0f s", self.load_problem, self._probe_s)
        self._retry_at = time.monotonic() + self._probe_s

    def switch_default(self) -> StreamingSynthesizer:
        """Load the default voice again (its graphs as its precision now selects them:
        INT8 once prepared), warm it and its hot phrases, and make it the default. An
        utterance in flight keeps the synthesizer it started with (see the class)."""
        synth = self._make(self.config.engine.voice, self._engine_config)
        synth.pin_hot_phrases()
        with self._load_lock:
            self._set_default(synth)
        return synth

    @property
    def _probe_s(self) -> float:
        return self.config.engine.fallback_probe_s

    def problems(self) -> list[str]:
        """What the voices lack now: a primary that did not load, voices set aside."""
        return [p for p in (self.load_problem,) if p] + self.failover.problems()

    def retry_primary(self) -> None:
        """After a primary that did not load: load it again once `engine.fallback_probe_s`
        has passed, on a thread of its own (seconds of CPU); it becomes the default when
        it loads. Called from the daemon's main loop."""
        if self.load_problem is None or time.monotonic() < self._retry_at:
            return
        if not self._retrying.acquire(blocking=False):
            return
        self._retry_at = time.monotonic() + self._probe_s
        threading.Thread(target=self._retry, name="magpie-probe", daemon=True).start()

    def _retry(self) -> None:
        try:
            synth = self._make(self.config.engine.voice, self._engine_config)
        except Exception as exc:
            log.warning("voice %s still does not load: %s", self.config.engine.voice, exc)
            return
        finally:
            self._retrying.release()
        with self._load_lock:
            self._set_default(synth)
            self.load_problem = None
        log.warning("voice %s loaded: no longer on the fallback", synth.voice.name)
        self.failover.on_change()

    @property
    def default_loaded(self) -> bool:
        return self._default is not None

    @property
    def default(self) -> StreamingSynthesizer:
        if self._default is None:
            raise VoiceError("the default voice is not loaded yet")
        return self._default

    def get(self, name: str | None) -> StreamingSynthesizer:
        """The synthesizer for a voice name, loading it if need be (VoiceError: unknown)."""
        entry = self._entry(name)
        if entry is None:
            return self.default
        synth = self._cached(entry)
        if synth is not None:
            return synth
        with self._load_lock:
            synth = self._cached(entry)  # loaded while this thread waited
            if synth is None:
                synth = self._load(entry)
        return synth

    def check(self, name: str | None) -> StreamingSynthesizer | None:
        """Raise VoiceError now for a voice a request cannot use (before queueing); the
        synthesizer when it is loaded. Never waits for a load."""
        entry = self._entry(name)
        if entry is None:
            return self.default
        with self._lock:
            if entry.key in self._failed:
                raise unknown_voice(entry.name)
            return self._loaded.get(entry.key)

    def catalogue(self) -> list[VoiceSummary]:
        """Every voice a request can name: the default, then `engine.voices_dir`'s, then
        the installed packages'."""
        self._refresh()
        with self._lock:
            return [e.summary for e in self._table.values() if e.key not in self._failed]

    def loaded(self) -> list[str]:
        """Names of the voices loaded now, the default first (status, metrics)."""
        with self._lock:
            return [self.default.voice.name, *(s.voice.name for s in self._loaded.values())]

    # -- names ---------------------------------------------------------------------------

    def _entry(self, name: str | None) -> _Entry | None:
        """The catalogue's entry for a request's voice name; None: the default voice."""
        if not name or name == DEFAULT_ALIAS:
            return None
        self._refresh()
        entry = self._table.get(name)
        if entry is None:
            raise unknown_voice(name)
        return None if entry is self._default_entry else entry

    def _refresh(self, force: bool = False) -> None:
        """Read the catalogue again when `engine.voices_dir` changed (a stat a request)."""
        if self._default_entry is None:
            raise VoiceError("the default voice is not loaded yet")
        directory = self.config.engine.voices_dir
        try:
            info = os.stat(directory) if directory is not None else None
        except OSError:
            info = None
        stamp = (info.st_ino, info.st_mtime_ns) if info is not None else None
        if stamp == self._stamp and not force:
            return
        models = []
        if directory is not None and info is not None:
            models = sorted(
                p for p in directory.glob("*.onnx") if not p.name.startswith(".") and p.is_file()
            )
        table = {self._default_entry.name: self._default_entry}
        keys = {self._default_entry.key}
        for model in [*models, *self._packages]:  # the operator's folder first
            entry = self._inspect(model)
            if entry is None or entry.name in table or entry.name == DEFAULT_ALIAS:
                continue
            if entry.key not in keys:  # one name per file: the first listed
                table[entry.name] = entry
                keys.add(entry.key)
        with self._lock:
            self._table, self._stamp = table, stamp
            self._failed.clear()  # the folder changed: a fixed voice may load now
            for key in [k for k in self._loaded if k not in keys]:  # no longer listed
                del self._loaded[key]

    def _inspect(self, model: Path) -> _Entry | None:
        """The entry for an operator's file, or None (logged once) if it is not a voice."""
        try:
            info = model.stat()
            seen = (str(model), info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            return None
        if seen not in self._seen:
            try:
                summary = inspect_voice(model)
                self._seen[seen] = _Entry(summary.name, summary, (info.st_dev, info.st_ino))
            except VoiceError as exc:
                log.warning("%s is not listed as a voice: %s", model, exc)
                self._seen[seen] = None
        return self._seen[seen]

    # -- loading -------------------------------------------------------------------------

    def _cached(self, entry: _Entry) -> StreamingSynthesizer | None:
        with self._lock:
            if entry.key in self._failed:
                raise unknown_voice(entry.name)
            synth = self._loaded.get(entry.key)
            if synth is not None:
                self._loaded.move_to_end(entry.key)  # the most recently used
            return synth

    def _load(self, entry: _Entry) -> StreamingSynthesizer:
        """Load a catalogued voice (with `_load_lock` held); one that fails is unknown."""
        log.info("loading voice %s", entry.name)  # a catalogue name, not the client's text
        try:
            synth = StreamingSynthesizer(load_voice(entry.summary.model_path), self._engine_config)
        except Exception as exc:  # any failure: the same answer as an unknown name
            log.warning("voice %s (%s) did not load: %s", entry.name, entry.summary.model_path, exc)
            with self._lock:
                self._failed.add(entry.key)
            raise unknown_voice(entry.name) from None
        with self._lock:
            self._loaded[entry.key] = synth
            dropped = []
            while len(self._loaded) > self.config.engine.max_voices:
                dropped.append(self._loaded.popitem(last=False)[1])
        if dropped:
            log.info("voices dropped (engine.max_voices): %s", [s.voice.name for s in dropped])
            del dropped
            gc.collect()  # a synthesizer's parts refer to each other: free its sessions now
        return synth
