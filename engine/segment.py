"""Clause segmentation shared by whole-text and incremental (token-stream) input.

A clause ends at . ! ? ; : , (plus closing quotes/brackets) followed by whitespace, at a
line break, or after `max_words` words without punctuation. Both input modes use the same
rule, so streamed text yields exactly the clauses that the whole text would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .text import abbreviation_before

DEFAULT_MAX_WORDS = 20

_BOUNDARY = re.compile(r"[.!?;:,\u2026]+[\"'\u201d\u2019)\]]*(?=\s)|\n")
_WORD_END = re.compile(r"\S(?=\s)")


def _clause_end(text: str, start: int, max_words: int) -> int | None:
    """Index just past the first complete clause in text[start:], or None if none yet."""
    for match in _BOUNDARY.finditer(text, start):
        end = match.end()
        if match[0][0] == "." and abbreviation_before(text, match.start()):
            continue
        words_before = len(text[start : match.start()].split())
        if words_before > max_words:
            break
        return end
    for words, match in enumerate(_WORD_END.finditer(text, start), start=1):
        if words == max_words:
            return match.end()
    return None


def split_clauses(text: str, max_words: int = DEFAULT_MAX_WORDS) -> list[str]:
    splitter = ClauseSplitter(max_words)
    clauses = list(splitter.feed(text))
    clauses.extend(splitter.flush())
    return clauses


class ClauseSplitter:
    """Accumulates text pieces and releases each clause once it is complete."""

    def __init__(self, max_words: int = DEFAULT_MAX_WORDS) -> None:
        self.max_words = max_words
        self._buffer = ""

    @property
    def pending(self) -> str:
        return self._buffer

    def feed(self, piece: str) -> Iterator[str]:
        self._buffer += piece
        while True:
            end = _clause_end(self._buffer, 0, self.max_words)
            if end is None:
                return
            clause, self._buffer = self._buffer[:end].strip(), self._buffer[end:].lstrip()
            if clause:
                yield clause

    def flush(self) -> Iterator[str]:
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            yield rest
