"""Phrase cache: hot phrases only, in memory first, on disk only when asked.

A smart speaker repeats itself ("Okay.", "Timer done."): a hit streams at once. But what
it says is private (messages, reminders), so a unit is cached only when it is hot:
- configured (`hot_phrases`, synthesized at start and never evicted),
- marked cacheable by the request, or
- synthesized `repeats` times within `window_s` (counted by key hash; no text is kept).
Disk is optional (`disk=True`); without it nothing spoken ever reaches the disk, and
files an earlier version left there are removed at start.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..values import SynthesisOptions
    from ..voice import Voice

log = logging.getLogger(__name__)

_TRACKED_KEYS = 4096  # repeat counters kept (hashes and timestamps only)


@dataclass(frozen=True)
class CacheConfig:
    memory_bytes: int = 8 << 20  # 0 disables the cache
    disk: bool = False  # also keep cached phrases under <state>/phrases (survive restarts)
    repeats: int = 3  # a unit synthesized this often within window_s becomes cached
    window_s: float = 3600.0
    hot_phrases: tuple[str, ...] = ()


class PhraseCache:
    def __init__(self, config: CacheConfig, directory: Path) -> None:
        self.config = config
        self.directory = directory
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self._memory_bytes = 0
        self._pinned: set[str] = set()
        self._seen: OrderedDict[str, collections.deque[float]] = OrderedDict()
        self._disk: OrderedDict[str, int] = OrderedDict()
        if config.disk:
            directory.mkdir(parents=True, exist_ok=True)
            files = sorted(directory.glob("*.pcm"), key=lambda p: p.stat().st_mtime)
            for path in files:
                self._disk[path.stem] = path.stat().st_size
            self._evict_disk()
        else:
            self.purge_disk()

    @staticmethod
    def key(voice: Voice, precision: str, options: SynthesisOptions, unit: str) -> str:
        parts = (
            voice.name,
            voice.model_hash,
            precision,
            f"{options.speed:.3f}",
            str(options.noise_scale),
            str(options.noise_w),
            str(options.speaker),
            unit,
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            pcm = self._memory.get(key)
            if pcm is not None:
                self._memory.move_to_end(key)
                self.hits += 1
                return pcm
            on_disk = key in self._disk
        if on_disk:
            try:
                pcm = np.fromfile(self.directory / f"{key}.pcm", dtype=np.int16)
                os.utime(self.directory / f"{key}.pcm")
            except OSError:
                with self._lock:
                    self._disk.pop(key, None)
            else:
                self._remember(key, pcm, pinned=False)
                with self._lock:
                    self.hits += 1
                return pcm
        with self._lock:
            self.misses += 1
        return None

    def holds(self, key: str) -> bool:
        """Whether `key`'s audio is kept (in memory or on disk); counts no hit."""
        with self._lock:
            return key in self._memory or key in self._disk

    def wants(self, key: str, marked: bool = False, now: float | None = None) -> bool:
        """Count this synthesis of `key`; True if its audio should be kept."""
        if marked or key in self._pinned:
            return True
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._seen.setdefault(key, collections.deque(maxlen=self.config.repeats))
            self._seen.move_to_end(key)
            times.append(now)
            while len(self._seen) > _TRACKED_KEYS:
                self._seen.popitem(last=False)
            full = len(times) >= self.config.repeats
            return full and now - times[0] <= self.config.window_s

    def put(self, key: str, pcm: np.ndarray, pinned: bool = False) -> None:
        pcm = np.ascontiguousarray(pcm, dtype=np.int16)
        if not pinned and pcm.nbytes > self.config.memory_bytes // 4:
            return  # one long text would flush every short phrase
        self._remember(key, pcm, pinned)
        if self.config.disk:
            self._write(key, pcm)

    def _remember(self, key: str, pcm: np.ndarray, pinned: bool) -> None:
        with self._lock:
            if pinned:
                self._pinned.add(key)
            old = self._memory.pop(key, None)
            self._memory_bytes -= 0 if old is None else old.nbytes
            self._memory[key] = pcm
            self._memory_bytes += pcm.nbytes
            for victim in [k for k in self._memory if k not in self._pinned]:
                if self._memory_bytes <= self.config.memory_bytes:
                    break
                self._memory_bytes -= self._memory.pop(victim).nbytes

    def _write(self, key: str, pcm: np.ndarray) -> None:
        path = self.directory / f"{key}.pcm"
        tmp = path.with_suffix(".tmp")
        try:
            pcm.tofile(tmp)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("phrase cache write failed: %s", exc)
            return
        with self._lock:
            self._disk[key] = pcm.nbytes
            self._disk.move_to_end(key)
            self._evict_disk()

    def _evict_disk(self) -> None:
        total = sum(self._disk.values())
        while total > self.config.memory_bytes and self._disk:
            old, size = self._disk.popitem(last=False)
            total -= size
            (self.directory / f"{old}.pcm").unlink(missing_ok=True)

    def purge_disk(self) -> int:
        """Delete cached audio files (`magpie-tts cache clear`, or disk caching off)."""
        return clear_directory(self.directory)

    def clear(self) -> int:
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0
            self._pinned.clear()
            self._seen.clear()
            self._disk.clear()
        return self.purge_disk()

    @property
    def entries(self) -> int:
        with self._lock:
            return len(self._memory)


def clear_directory(directory: Path) -> int:
    removed = 0
    if directory.is_dir():
        for path in [*directory.glob("*.pcm"), *directory.glob("*.tmp")]:
            path.unlink(missing_ok=True)
            removed += 1
    if removed:
        log.info("removed %d cached phrase file(s) from %s", removed, directory)
    return removed
