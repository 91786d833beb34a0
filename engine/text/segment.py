"""Segmentation of text into synthesis units, shared by whole and incremental input.

The first unit of an utterance is its first clause, ended by . ! ? ; : , (plus closing
quotes/brackets) and whitespace: the frontend runs over a whole unit before any sound,
so a short first unit sets the time to first audio. In a long first sentence (no
punctuation within 2 × `first_words` words) it is cut before a function word ("and",
"with", "because"...) near `first_words`. Every later unit is a whole sentence, for
prosody, unless it runs past `max_words` + a third: then it ends at its last clause
boundary within that reach, or is cut before a function word near `max_words`.

Both input modes use this one rule on the text seen so far, so streamed text (LLM tokens)
yields exactly the units that the whole text would.

A unit cut between two words of a sentence carries the words around the cut (`Unit.after`,
and `before` on the unit that continues it): spoken alone, it would end as an utterance
ends (a falling pitch, a pause), a speaker who stops mid-phrase. The engine speaks it with
those words and keeps only its own (stream/units.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .normalize import abbreviation_before

DEFAULT_MAX_WORDS = 20
DEFAULT_FIRST_WORDS = 6
MIN_WORDS = 3
# Words of context across a cut. Measured (noise off, 5 sentences): with 1 or 2 words the
# pause at "arrived ‖ at" stayed 40 ms over whole-sentence synthesis, with 3 none did; 3
# words cost the first unit ~5 ms of frontend time.
CONTEXT_WORDS = 3


@dataclass(frozen=True)
class Prosody:
    """How an SSML unit is spoken (ssml.py): silence before and after it, its rate (a
    speed multiplier), its gain, and its marks as (word index in the unit, name): a mark
    stands before that word (at the unit's word count: after its last word)."""

    pause_s: float = 0.0
    rate: float = 1.0
    gain: float = 1.0
    tail_s: float = 0.0
    marks: tuple[tuple[int, str], ...] = ()


PLAIN = Prosody()


class Unit(str):
    """A unit's text, with the words around it when it was cut mid-sentence, and how it
    is spoken (SSML's breaks, prosody and marks; PLAIN for plain text).

    A str, so units travel through queues, logs and the daemon as plain text; only the
    engine reads the context and prosody.
    """

    before: str
    after: str
    prosody: Prosody

    def __new__(
        cls, text: str, before: str = "", after: str = "", prosody: Prosody = PLAIN
    ) -> Unit:
        unit = super().__new__(cls, text)
        unit.before, unit.after, unit.prosody = before, after, prosody
        return unit

    def __reduce__(self) -> tuple[type[Unit], tuple[str, str, str, Prosody]]:
        return Unit, (str(self), self.before, self.after, self.prosody)


def context_of(unit: str) -> tuple[str, str]:
    """(before, after) words of a unit; empty for one that is not cut mid-sentence."""
    return getattr(unit, "before", ""), getattr(unit, "after", "")


def prosody_of(unit: str) -> Prosody:
    """How a unit is spoken: PLAIN unless SSML said otherwise."""
    return getattr(unit, "prosody", PLAIN)


_BOUNDARY = re.compile(r"[.!?;:,\u2026]+[\"'\u201d\u2019)\]]*(?=\s)|\n")
_SENTENCE_END = re.compile(r"[.!?\u2026]")
_WORD = re.compile(r"\S+(?=\s)")
_PHONEME_BLOCK = re.compile(r"\[\[.*?\]\]", re.S)
BREAK_WORDS = frozenset(
    "and but or nor so yet because while although though which who whom whose that when "
    "where after before until since unless if than as with without from for to in on at "
    "of by into onto about over under through during across between".split()
)


def _boundaries(text: str) -> Iterator[tuple[re.Match[str], int, bool]]:
    """(match, words before it, ends a sentence) for each clause boundary, in order.

    Stops at an inline phoneme block that is still open: its end is not known yet.
    """
    blocks = [m.span() for m in _PHONEME_BLOCK.finditer(text)]
    for match in _BOUNDARY.finditer(text):
        if match[0][0] == "." and abbreviation_before(text, match.start()):
            continue
        if any(lo <= match.start() < hi for lo, hi in blocks):
            continue  # punctuation inside inline [[ phonemes ]] belongs to them
        if text.rfind("[[", 0, match.start()) > text.rfind("]]", 0, match.start()):
            return
        sentence = match[0] == "\n" or bool(_SENTENCE_END.search(match[0]))
        yield match, len(text[: match.start()].split()), sentence


def _unit_end(
    text: str, limit: int, patience: int, whole_sentence: bool
) -> tuple[int, bool] | None:
    """(index just past the first complete unit, cut between words) or None if not
    decidable yet."""
    words = []
    for match in _WORD.finditer(text):
        words.append(match)
        if len(words) > patience:
            break
    last_within = None
    for match, count, sentence in _boundaries(text):
        if count > patience:
            break
        if sentence or not whole_sentence:
            return match.end(), False
        last_within = match.end()
    if len(words) <= patience:
        return None  # no end yet, and not so long that it must be cut
    if last_within is not None:
        return last_within, False  # a long sentence ends its unit at its last clause boundary
    reach = limit + limit // 3
    for size in range(min(reach, len(words) - 1), MIN_WORDS - 1, -1):
        if words[size][0].lower().strip("\"'(“‘") in BREAK_WORDS:
            return words[size - 1].end(), True
    return words[limit - 1].end(), True


def _words_after(text: str, count: int) -> str:
    """Up to `count` complete words at the start of text, to the end of its sentence."""
    words: list[str] = []
    for match in _WORD.finditer(text):
        if "[[" in match[0] or "]]" in match[0]:
            break  # inline phonemes are not context material
        words.append(match[0])
        if len(words) == count or _SENTENCE_END.search(match[0]):
            break
    return " ".join(words)


def split_clauses(
    text: str, max_words: int = DEFAULT_MAX_WORDS, first_words: int = DEFAULT_FIRST_WORDS
) -> list[Unit]:
    splitter = ClauseSplitter(max_words, first_words)
    clauses = list(splitter.feed(text))
    clauses.extend(splitter.flush())
    return clauses


class ClauseSplitter:
    """Accumulates text pieces and releases each unit once it is complete."""

    def __init__(
        self, max_words: int = DEFAULT_MAX_WORDS, first_words: int = DEFAULT_FIRST_WORDS
    ) -> None:
        self.max_words = max_words
        self.first_words = first_words
        self._buffer = ""
        self._emitted = 0
        self._before = ""  # the last words of a unit that was cut mid-sentence

    def _end(self) -> tuple[int, bool] | None:
        if self._emitted == 0 and self.first_words:
            patience = max(2 * self.first_words, self.first_words + 4)
            return _unit_end(self._buffer, self.first_words, patience, whole_sentence=False)
        patience = self.max_words + self.max_words // 3
        return _unit_end(self._buffer, self.max_words, patience, whole_sentence=True)

    def feed(self, piece: str) -> Iterator[Unit]:
        self._buffer += piece
        while True:
            found = self._end()
            if found is None:
                return
            end, cut = found
            clause, self._buffer = self._buffer[:end].strip(), self._buffer[end:].lstrip()
            if clause:
                yield self._unit(clause, _words_after(self._buffer, CONTEXT_WORDS) if cut else "")

    def flush(self) -> Iterator[Unit]:
        """End of text: the end counts as whitespace, then the rest is one unit."""
        yield from self.feed(" ")
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            yield self._unit(rest, "")

    def _unit(self, text: str, after: str) -> Unit:
        unit = Unit(text, self._before, after)
        self._emitted += 1
        self._before = " ".join(text.split()[-CONTEXT_WORDS:]) if after else ""
        return unit


_SPOKEN_WORD = re.compile(r"\[\[.*?\]\]|[^\s\[]+|\[", re.S)


def spoken_words(text: str) -> list[str]:
    """The words of a normalized unit, an inline [[ phoneme ]] block as one word."""
    return _SPOKEN_WORD.findall(text)
