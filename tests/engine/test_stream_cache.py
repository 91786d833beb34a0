"""Phrase cache: only hot phrases are kept, in memory; nothing spoken reaches the disk
unless asked; the self-test measures synthesis, not the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from magpie_tts.engine import StreamingSynthesizer, SynthesisOptions
from magpie_tts.engine.runtime import RuntimeConfig
from magpie_tts.engine.stream.cache import CacheConfig, PhraseCache
from magpie_tts.engine.stream.config import EngineConfig

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)


def make(voice, folder: Path, **cache) -> StreamingSynthesizer:
    config = EngineConfig(
        cache_dir=folder,
        runtime=RuntimeConfig(provider="cpu"),
        precision="fp32",
        cache=CacheConfig(**{"memory_bytes": 4 << 20, **cache}),
    )
    return StreamingSynthesizer(voice, config)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix in (".pcm", ".tmp")]


@pytest.fixture(scope="module")
def shared_split(tmp_path_factory, voice) -> Path:
    """A state folder with the split graphs, so each test copies no model."""
    folder = tmp_path_factory.mktemp("cache-state")
    make(voice, folder, memory_bytes=0)
    return folder


def test_a_unique_sentence_spoken_once_leaves_nothing_on_disk(voice, shared_split) -> None:
    synth = make(voice, shared_split)  # the daemon's defaults: memory only
    synth.synthesize("Your bank code is four four seven one.", QUIET)
    assert files_under(shared_split) == []
    assert synth.phrase_cache is not None and synth.phrase_cache.entries == 0


def test_a_phrase_repeated_within_the_window_becomes_a_hit(voice, shared_split) -> None:
    synth = make(voice, shared_split, repeats=3)
    heard = [synth.synthesize("Timer done.", QUIET) for _ in range(3)]
    assert synth.phrase_cache.hits == 0  # synthesized three times, kept on the third
    chunks = list(synth.stream("Timer done.", QUIET))
    assert synth.phrase_cache.hits == 1
    assert len(chunks) == 1 and chunks[0].cached
    assert np.array_equal(chunks[0].pcm, heard[-1])
    assert files_under(shared_split) == []


def test_marked_and_hot_phrases_are_kept_at_once(voice, shared_split) -> None:
    synth = make(voice, shared_split, hot_phrases=("One moment.",))
    assert synth.pin_hot_phrases() == 1
    assert next(iter(synth.stream("One moment."))).cached  # requests with default options
    units = synth.clauses("See you soon.")
    list(synth.stream_clauses(units, QUIET, cache_use="keep"))
    assert all(c.cached for c in synth.stream_clauses(units, QUIET))
    # bypass: the self-test's way to measure synthesis even for a cached phrase
    assert not any(c.cached for c in synth.stream_clauses(units, QUIET, cache_use="bypass"))


def test_disk_only_when_asked_and_cleared(voice, shared_split, tmp_path) -> None:
    synth = make(voice, shared_split, disk=True)
    list(synth.stream_clauses(synth.clauses("Good night."), QUIET, cache_use="keep"))
    assert len(files_under(shared_split / "phrases")) == 1
    again = make(voice, shared_split, disk=True)  # a restart finds it
    assert next(iter(again.stream("Good night.", QUIET))).cached
    make(voice, shared_split)  # disk caching off: what an earlier run left is removed
    assert files_under(shared_split) == []


def test_memory_bound_keeps_pinned_phrases(tmp_path) -> None:
    cache = PhraseCache(CacheConfig(memory_bytes=4000), tmp_path)
    cache.put("pinned", np.zeros(900, np.int16), pinned=True)
    for index in range(10):
        cache.put(f"k{index}", np.zeros(400, np.int16))
    assert cache.get("pinned") is not None
    assert cache.get("k0") is None and cache.get("k9") is not None
    assert cache.entries <= 4
