"""Phrase cache: LRU of synthesized clause PCM on disk, bounded in bytes.

Smart speakers repeat themselves ("Timer done.", "OK."): a hit streams at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .synth import SynthesisOptions
    from .voice import Voice

log = logging.getLogger(__name__)


class PhraseCache:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()
        directory.mkdir(parents=True, exist_ok=True)
        files = sorted(directory.glob("*.pcm"), key=lambda p: p.stat().st_mtime)
        for path in files:
            self._entries[path.stem] = path.stat().st_size
        self._evict()

    @staticmethod
    def key(voice: Voice, precision: str, options: SynthesisOptions, clause: str) -> str:
        parts = (
            voice.name,
            voice.model_hash,
            precision,
            f"{options.speed:.3f}",
            str(options.noise_scale),
            str(options.noise_w),
            str(options.speaker),
            clause,
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]

    def get(self, key: str) -> np.ndarray | None:
        path = self.directory / f"{key}.pcm"
        with self._lock:
            if key not in self._entries:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
        try:
            data = np.fromfile(path, dtype=np.int16)
            os.utime(path)
        except OSError:
            with self._lock:
                self._entries.pop(key, None)
            self.misses += 1
            return None
        self.hits += 1
        return data

    def put(self, key: str, pcm: np.ndarray) -> None:
        if pcm.nbytes > self.max_bytes // 4:
            return  # long texts would flush every short phrase
        path = self.directory / f"{key}.pcm"
        tmp = path.with_suffix(".tmp")
        try:
            pcm.astype(np.int16).tofile(tmp)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("phrase cache write failed: %s", exc)
            return
        with self._lock:
            self._entries[key] = pcm.nbytes
            self._entries.move_to_end(key)
            self._evict()

    def _evict(self) -> None:
        total = sum(self._entries.values())
        while total > self.max_bytes and self._entries:
            old, size = self._entries.popitem(last=False)
            total -= size
            (self.directory / f"{old}.pcm").unlink(missing_ok=True)
