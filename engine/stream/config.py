"""The engine's configuration: what a synthesizer loads and how it streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..runtime import RuntimeConfig
from ..text.policy import TextPolicy
from .cache import CacheConfig
from .decoder import DEFAULT_SCHEDULE

Precision = Literal["auto", "fp32", "int8"]
CacheUse = Literal["auto", "keep", "pin", "bypass"]


@dataclass(frozen=True)
class EngineConfig:
    cache_dir: Path
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    precision: Precision = "auto"
    schedule: tuple[int, ...] = DEFAULT_SCHEDULE
    context: int | None = None  # None: the decoder's receptive field (exact windows)
    text: TextPolicy = field(default_factory=TextPolicy)
    cache: CacheConfig = field(default_factory=lambda: CacheConfig(memory_bytes=0))
    # Lanes of sessions that serve several streams side by side, each on its share of
    # the threads (CPU only; turns.py); 0: one stream's turn at a time on every thread.
    workers: int = 0
    # Run the flow (z_p → z) apart from the encoder, over the frames each window needs
    # (latent.py); False runs the frontend whole, as before (for comparison).
    windowed_flow: bool = True
    # Noise per unit from its phoneme ids and this seed: the same text, the same audio
    # (tests, bug reports). None: fresh noise every time, as Piper does.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ValueError(f"seed {self.seed} outside 0..2**32-1")
