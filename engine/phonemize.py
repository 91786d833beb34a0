"""Clause text → phoneme ids with piper's in-process espeak-ng bridge (no subprocess)."""

from __future__ import annotations

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


def _espeak():
    global _espeak_ready
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    if not _espeak_ready:
        espeakbridge.initialize(str(ESPEAK_DATA_DIR))
        _espeak_ready = True
    return espeakbridge


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
            with _ESPEAK_LOCK:
                bridge = _espeak()
                bridge.set_voice(self.voice.espeak_voice)
                pieces = bridge.get_phonemes(part)
            for phonemes, terminator, _end in pieces:
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
