"""Clause segmentation shared by whole-text and incremental (token-stream) input.

A clause ends at . ! ? ; : , (plus closing quotes/brackets) followed by whitespace, or at a
line break. A clause far longer than its word limit is cut before a function word ("and",
"with", "because"...) near the limit, or at the limit. The first clause of a long
sentence has a smaller limit: the frontend runs over a whole clause before any audio
exists, so the first clause sets the time to first sound. Both input modes use this one rule, so
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


def _clause_end(text: str, limit: int, patience: int) -> int | None:
    """Index just past the first complete clause in text, or None if not decidable yet.

    A clause that ends (punctuation) within `patience` words is kept whole; a longer one
    is cut before a function word near `limit`, or at `limit`.
    """
    reach = limit + limit // 3  # a little past the limit, to find a natural break
    words = []
    for match in _WORD.finditer(text):
        words.append(match)
        if len(words) > patience:
            break
    blocks = [m.span() for m in _PHONEME_BLOCK.finditer(text)]
    for match in _BOUNDARY.finditer(text):
        if match[0][0] == "." and abbreviation_before(text, match.start()):
            continue
        if any(lo <= match.start() < hi for lo, hi in blocks):
            continue  # punctuation inside inline [[ phonemes ]] belongs to them
        if text.rfind("[[", 0, match.start()) > text.rfind("]]", 0, match.start()):
            return None  # an inline phoneme block is still open: wait for its end
        if len(text[: match.start()].split()) <= patience:
            return match.end()
        break
    if len(words) <= patience:
        return None  # no boundary yet, and not so long that it must be cut
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

    def _limits(self) -> tuple[int, int]:
        """(limit, patience): the first clause is cut short only in a long sentence, where
        the frontend would otherwise run over many words before the first sound."""
        if self._emitted == 0 and self.first_words < self.max_words:
            return self.first_words, max(2 * self.first_words, self.first_words + 4)
        return self.max_words, self.max_words + self.max_words // 3

    def feed(self, piece: str) -> Iterator[str]:
        self._buffer += piece
        while True:
            end = _clause_end(self._buffer, *self._limits())
            if end is None:
                return
            clause, self._buffer = self._buffer[:end].strip(), self._buffer[end:].lstrip()
            if clause:
                self._emitted += 1
                yield clause

    def flush(self) -> Iterator[str]:
        """End of text: the end counts as whitespace, then the rest is one clause."""
        yield from self.feed(" ")
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            self._emitted += 1
            yield rest
