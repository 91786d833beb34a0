"""Clause segmentation shared by whole-text and incremental (token-stream) input.

A clause ends at . ! ? ; : , (plus closing quotes/brackets) followed by whitespace, or at a
line break. A clause longer than its word limit is cut before a function word ("and",
"with", "because"...) near the limit, or at the limit. The first clause of an utterance
has a smaller limit: the frontend runs over a whole clause before any audio exists, so
the first clause sets the time to first sound. Both input modes use this one rule, so
streamed text yields exactly the clauses that the whole text would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .text import abbreviation_before

DEFAULT_MAX_WORDS = 20
DEFAULT_FIRST_WORDS = 6
MIN_WORDS = 3

_BOUNDARY = re.compile(r"[.!?;:,\u2026]+[\"'\u201d\u2019)\]]*(?=\s)|\n")
_WORD = re.compile(r"\S+(?=\s)")
_PHONEME_BLOCK = re.compile(r"\[\[.*?\]\]", re.S)
BREAK_WORDS = frozenset(
    "and but or nor so yet because while although though which who whom whose that when "
    "where after before until since unless if than as with without from for to in on at "
    "of by into onto about over under through during across between".split()
)


def _clause_end(text: str, limit: int, final: bool = False) -> int | None:
    """Index just past the first complete clause in text, or None if not decidable yet."""
    reach = limit + limit // 3  # a little past the limit, to find a natural break
    words = []
    for match in _WORD.finditer(text):
        words.append(match)
        if len(words) > reach:
            break
    blocks = [m.span() for m in _PHONEME_BLOCK.finditer(text)]
    for match in _BOUNDARY.finditer(text):
        if match[0][0] == "." and abbreviation_before(text, match.start()):
            continue
        if any(lo <= match.start() < hi for lo, hi in blocks):
            continue  # punctuation inside inline [[ phonemes ]] belongs to them
        if text.rfind("[[", 0, match.start()) > text.rfind("]]", 0, match.start()):
            return None  # an inline phoneme block is still open: wait for its end
        if len(text[: match.start()].split()) <= limit:
            return match.end()
        break
    if len(words) <= (limit if final else reach):
        return None  # neither a boundary nor enough words to cut yet
    for size in range(min(reach, len(words) - 1), MIN_WORDS - 1, -1):
        if words[size][0].lower().strip("\"'(“‘") in BREAK_WORDS:
            return words[size - 1].end()
    return words[limit - 1].end()


def split_clauses(
    text: str, max_words: int = DEFAULT_MAX_WORDS, first_words: int = DEFAULT_FIRST_WORDS
) -> list[str]:
    splitter = ClauseSplitter(max_words, first_words)
    clauses = list(splitter.feed(text))
    clauses.extend(splitter.flush())
    return clauses


class ClauseSplitter:
    """Accumulates text pieces and releases each clause once it is complete."""

    def __init__(
        self, max_words: int = DEFAULT_MAX_WORDS, first_words: int = DEFAULT_FIRST_WORDS
    ) -> None:
        self.max_words = max_words
        self.first_words = first_words or max_words
        self._buffer = ""
        self._emitted = 0

    def _limit(self) -> int:
        return self.first_words if self._emitted == 0 else self.max_words

    def feed(self, piece: str, final: bool = False) -> Iterator[str]:
        self._buffer += piece
        while True:
            end = _clause_end(self._buffer, self._limit(), final)
            if end is None:
                return
            clause, self._buffer = self._buffer[:end].strip(), self._buffer[end:].lstrip()
            if clause:
                self._emitted += 1
                yield clause

    def flush(self) -> Iterator[str]:
        """End of text: the end counts as whitespace, then the rest is one clause."""
        yield from self.feed(" ", final=True)
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            self._emitted += 1
            yield rest
