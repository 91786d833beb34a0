"""Pronunciation dictionaries: words said as given IPA, whole words, any case.

The format is Riva's `custom_dictionary`: `word  IPA`, the word and its pronunciation
separated by two spaces (or a tab); a file has one entry a line (`#` starts a comment), a
request's string separates its entries with commas. A word may be several words
("New York"). Each match becomes an inline `[[ IPA ]]` block before normalization, so
the phonemizer passes the symbols to the voice as they are.

A `Lexicon` is swapped whole on reload (`replace`): a reader sees the old entries or the
new ones, never a mix.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import TextError

MAX_ENTRIES = 10_000
_SEPARATOR = re.compile(r"\t+|  +")
_BLOCK = re.compile(r"(\[\[.*?\]\])", re.S)


class LexiconError(TextError):
    """An entry that cannot be used; the message names its line (or request entry)."""


@dataclass(frozen=True)
class Entry:
    word: str
    ipa: str
    where: str  # "line 3" / "entry 2": for errors


def parse(lines: Iterable[str], where: str = "line") -> list[Entry]:
    """Entries of `word  IPA` lines (blank lines and `#` comments skipped)."""
    entries: list[Entry] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = _SEPARATOR.split(line, maxsplit=1)
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise LexiconError(f"{where} {number}: expected 'word  IPA' (two spaces between)")
        ipa = parts[1].strip()
        if "[" in ipa or "]" in ipa:
            raise LexiconError(f"{where} {number}: a pronunciation cannot hold '[' or ']'")
        entries.append(Entry(" ".join(parts[0].split()), ipa, f"{where} {number}"))
        if len(entries) > MAX_ENTRIES:
            raise LexiconError(f"more than {MAX_ENTRIES} entries")
    return entries


def parse_custom(text: str) -> list[Entry]:
    """A request's `custom_dictionary`: entries separated by commas."""
    return parse(text.split(","), where="custom_dictionary entry")


def unknown_symbols(entries: Iterable[Entry], symbols: Container[str]) -> None:
    """LexiconError naming the first entry with a phoneme the voice cannot say."""
    for entry in entries:
        for char in unicodedata.normalize("NFD", entry.ipa):
            if char not in symbols and not char.isspace():
                raise LexiconError(
                    f"{entry.where}: {char!r} (U+{ord(char):04X}) is not a phoneme of the voice"
                )


class Lexicon:
    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._state = _compile(list(entries))

    @classmethod
    def from_file(cls, path: Path) -> Lexicon:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LexiconError(f"cannot read the lexicon {path}: {exc}") from None
        return cls(parse(text.splitlines()))

    @property
    def entries(self) -> list[Entry]:
        return list(self._state[0].values())

    def __len__(self) -> int:
        return len(self._state[0])

    def replace(self, other: Lexicon) -> None:
        """Take `other`'s entries (a reload): one assignment, atomic for readers."""
        self._state = other._state

    def with_entries(self, entries: list[Entry]) -> Lexicon:
        """This lexicon with `entries` over it (a request's own win)."""
        return Lexicon([*self.entries, *entries]) if entries else self

    def apply(self, text: str) -> str:
        """Each listed whole word (any case) as its [[ IPA ]]; blocks already there stay."""
        words, pattern = self._state
        if pattern is None:
            return text
        parts = _BLOCK.split(text)
        for index in range(0, len(parts), 2):  # odd parts are blocks
            parts[index] = pattern.sub(lambda m: f" [[ {words[_key(m[0])].ipa} ]] ", parts[index])
        return "".join(parts)


def _key(word: str) -> str:
    return " ".join(word.split()).casefold()


def _compile(entries: list[Entry]) -> tuple[dict[str, Entry], re.Pattern[str] | None]:
    words = {_key(e.word): e for e in entries}  # a later entry wins
    if not words:
        return words, None
    # Longest first, so "New York" wins over "New"; spaces within match any whitespace.
    alternatives = sorted(words, key=len, reverse=True)
    body = "|".join(r"\s+".join(re.escape(w) for w in key.split()) for key in alternatives)
    return words, re.compile(rf"(?<![\w'])(?:{body})(?![\w'])", re.I)
