"""Clause text → phoneme ids with piper's in-process espeak-ng bridge (no subprocess)."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata

from .errors import TextError
from .voice import Voice

_PHONEME_BLOCK = re.compile(r"(\[\[.*?\]\])", re.S)
_LANG_FLAG = re.compile(r"\([^)]+\)")
_BOS, _EOS, _PAD = "^", "$", "_"

# espeak-ng keeps global state (voice, buffers): one caller at a time, process-wide.
_ESPEAK_LOCK = threading.Lock()
_espeak_ready = False
_espeak_voice: str | None = None


def _espeak(voice: str):  # type: ignore[no-untyped-def]
    """The bridge, set to `voice`. Call with _ESPEAK_LOCK held."""
    global _espeak_ready, _espeak_voice
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    if not _espeak_ready:
        espeakbridge.initialize(str(ESPEAK_DATA_DIR))
        _espeak_ready = True
    if voice != _espeak_voice:
        # set_voice leaks ~1.3 KB per call inside the bridge: only when it changes.
        espeakbridge.set_voice(voice)
        _espeak_voice = voice
    return espeakbridge


@functools.lru_cache(maxsize=4096)
def _espeak_phonemes(voice: str, text: str) -> tuple[tuple[str, str, bool], ...]:
    """Cached: a speaker repeats itself, and each bridge call leaks ~200 B (piper 1.8)."""
    with _ESPEAK_LOCK:
        return tuple(_espeak(voice).get_phonemes(text))


class Phonemizer:
    def __init__(self, voice: Voice) -> None:
        self.voice = voice

    def phonemes(self, clause: str) -> list[str]:
        """All phonemes of one clause, punctuation kept as piper's training data has it."""
        out: list[str] = []
        for part in _PHONEME_BLOCK.split(clause):
            if not part.strip():
                if part and out and out[-1] != " ":
                    out.append(" ")
                continue
            if part.startswith("[["):
                out.extend(unicodedata.normalize("NFD", part[2:-2].strip()))
                continue
            for phonemes, terminator, _end in _espeak_phonemes(self.voice.espeak_voice, part):
                text = _LANG_FLAG.sub("", phonemes) + terminator
                if out and out[-1] not in (" ",) and text and not text.startswith(" "):
                    out.append(" ")
                out.extend(unicodedata.normalize("NFD", text))
        while out and out[-1] == " ":
            out.pop()
        return out

    def ids(self, phonemes: list[str]) -> list[int]:
        id_map = self.voice.phoneme_id_map
        ids = [*id_map[_BOS], *id_map[_PAD]]
        known = 0
        for phoneme in phonemes:
            mapped = id_map.get(phoneme)
            if mapped is None:
                continue  # espeak can emit symbols a voice was not trained on
            ids.extend(mapped)
            ids.extend(id_map[_PAD])
            known += phoneme not in (" ", ",", ".", "!", "?", ";", ":")
        ids.extend(id_map[_EOS])
        if known == 0:
            raise TextError("nothing pronounceable in the text")
        return ids

    def clause_ids(self, clause: str) -> list[int]:
        return self.ids(self.phonemes(clause))
