"""Clause text → phoneme ids with piper's in-process espeak-ng bridge (no subprocess)."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata

from ..errors import TextError
from ..voice import Voice

_PHONEME_BLOCK = re.compile(r"(\[\[.*?\]\])", re.S)
_LANG_FLAG = re.compile(r"\([^)]+\)")
_BOS, _EOS, _PAD = "^", "$", "_"
_PAUSES = (" ", ",", ".", "!", "?", ";", ":")

# The most phoneme ids one frontend call gets. The frontend runs over a whole call before
# any sound, and its cost grows faster than linearly (measured here, 2 shared cores:
# 1.2-1.6 ms per id at 100-400 ids, 2.4 ms per id at 600; quiet, model-notes: ~0.4 ms
# per id, 130 ms for 315 ids). 400 ids holds a normal unit (a 26-word sentence is ~315),
# so only runaway units are cut, at word boundaries.
MAX_UNIT_IDS = 400

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
                if out and out[-1] != " ":
                    out.append(" ")  # a block is a word of its own
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

    def _encode(self, phonemes: list[str]) -> tuple[list[int], int]:
        """Ids of phonemes, a pad after each; and how many are pronounceable."""
        id_map = self.voice.phoneme_id_map
        ids: list[int] = []
        known = 0
        for phoneme in phonemes:
            mapped = id_map.get(phoneme)
            if mapped is None:
                continue  # espeak can emit symbols a voice was not trained on
            ids.extend(mapped)
            ids.extend(id_map[_PAD])
            known += phoneme not in _PAUSES
        return ids, known

    def ids(self, phonemes: list[str]) -> list[int]:
        id_map = self.voice.phoneme_id_map
        body, known = self._encode(phonemes)
        if known == 0:
            raise TextError("nothing pronounceable in the text")
        return [*id_map[_BOS], *id_map[_PAD], *body, *id_map[_EOS]]

    def ids_in_context(self, unit: str, before: str, after: str) -> tuple[list[int], int, int]:
        """Ids of `before unit after`, and the id range [start, stop) that is the unit's.

        The range starts at the unit's first phoneme (at 0 without words before) and ends
        where the words after begin, so the space between belongs to the unit (at the end,
        EOS included, without words after).
        """
        id_map = self.voice.phoneme_id_map
        head = [*id_map[_BOS], *id_map[_PAD]]
        if before:
            head += self._encode([*self.phonemes(before), " "])[0]
        core, known = self._encode(self.phonemes(unit))
        if known == 0:
            raise TextError("nothing pronounceable in the text")
        tail = self._encode([" ", *self.phonemes(after)])[0] if after else []
        ids = [*head, *core, *tail, *id_map[_EOS]]
        start = len(head) if before else 0
        stop = len(head) + len(core) + (len(id_map[" "]) + len(id_map[_PAD]) if after else 0)
        return ids, start, stop if after else len(ids)

    def word_spans(self, unit: str, before: str = "") -> tuple[list[tuple[int, int]], int]:
        """Each word's ids [start, stop) as offsets from the unit's first id, and where
        that first id is in the ids of `ids`/`ids_in_context` (word timings). A word is
        a run of phonemes between spaces; punctuation (a pause) belongs to none."""
        id_map = self.voice.phoneme_id_map
        first = len(id_map[_BOS]) + len(id_map[_PAD])
        if before:
            first += len(self._encode([*self.phonemes(before), " "])[0])
        spans: list[tuple[int, int]] = []
        word: tuple[int, int] | None = None
        position = 0
        for phoneme in self.phonemes(unit):
            mapped = id_map.get(phoneme)
            if mapped is None:
                continue
            size = len(mapped) + len(id_map[_PAD])
            if phoneme in _PAUSES:
                if word is not None:
                    spans.append(word)
                word = None
            else:
                word = (word[0] if word else position, position + size)
            position += size
        if word is not None:
            spans.append(word)
        return spans, first

    def clause_ids(self, clause: str) -> list[int]:
        return self.ids(self.phonemes(clause))

    def clause_id_parts(self, clause: str, max_ids: int = MAX_UNIT_IDS) -> list[list[int]]:
        """Ids of one unit in parts of at most max_ids, cut at word boundaries.

        Bounds the work before a unit's first sound whatever the text (a long paste, a
        run-on list): each part goes to the frontend on its own.
        """
        phonemes = self.phonemes(clause)
        id_map = self.voice.phoneme_id_map
        budget = max(8, max_ids - 3)  # BOS, PAD ... EOS around every part
        parts: list[list[str]] = []
        current: list[str] = []
        word: list[str] = []
        used = 0

        def cost(items: list[str]) -> int:
            return sum(len(id_map[p]) + 1 for p in items if p in id_map)

        for phoneme in [*phonemes, " "]:
            word.append(phoneme)
            if phoneme != " ":
                continue
            size = cost(word)
            if used + size > budget and current:
                parts.append(current)
                current, used = [], 0
            while size > budget:  # one word longer than a part: cut it hard
                head, word = _split_cost(word, budget, cost)
                parts.append(head)
                size = cost(word)
            current.extend(word)
            used += size
            word = []
        parts.append(current)
        pronounceable = [p for p in parts if any(x not in _PAUSES for x in p)]
        if not pronounceable:
            raise TextError("nothing pronounceable in the text")
        return [self.ids(_strip_spaces(p)) for p in pronounceable]


def _strip_spaces(phonemes: list[str]) -> list[str]:
    while phonemes and phonemes[-1] == " ":
        phonemes = phonemes[:-1]
    while phonemes and phonemes[0] == " ":
        phonemes = phonemes[1:]
    return phonemes


def _split_cost(word: list[str], budget: int, cost) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    used = 0
    for cut, phoneme in enumerate(word):
        used += cost([phoneme])
        if used > budget:
            return word[: max(cut, 1)], word[max(cut, 1) :]
    return word, []
