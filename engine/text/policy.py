"""The text policy: what text is accepted, and how it becomes synthesis units.

One voice-free place for every text rule — length limit, control characters, markup,
unit splitting, normalization, and incremental (streamed) text — built from
configuration. Frontends validate with it on arrival, the synthesizer speaks the units
it returns, so text is checked and split exactly once.
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..errors import TextError
from . import normalize as textmod
from . import ssml
from .lexicon import Lexicon, parse_custom
from .segment import (
    DEFAULT_FIRST_WORDS,
    DEFAULT_MAX_WORDS,
    ClauseSplitter,
    Unit,
    context_of,
    split_clauses,
)

DEFAULT_MAX_TEXT_CHARS = 10_000
_MARKUP = re.compile(r"<[A-Za-z/!?][^<>]*>")


@dataclass(frozen=True)
class TextPolicy:
    max_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_clause_words: int = DEFAULT_MAX_WORDS
    first_clause_words: int = DEFAULT_FIRST_WORDS  # 0: the first clause is not shortened
    # Markup outside SSML is refused rather than read out or silently stripped.
    reject_markup: bool = True
    # engine.lexicon's words (lexicon.py); swapped in place on reload
    lexicon: Lexicon = field(default_factory=Lexicon, compare=False)

    def check(self, text: str, streamed_total: int | None = None, markup: bool = False) -> str:
        """Refuse what a speaker must not read: too long, control characters, markup
        (unless `markup`: an SSML document, read by ssml.py)."""
        if not isinstance(text, str):
            raise TextError("text must be a string")
        total = len(text) if streamed_total is None else streamed_total
        if total > self.max_chars:
            what = "streamed text" if streamed_total is not None else "text"
            raise TextError(f"{what} too long: {total} characters (limit {self.max_chars})")
        for char in text:
            if unicodedata.category(char) == "Cc" and char not in "\t\n\r":
                raise TextError(f"text contains a control character (U+{ord(char):04X})")
        tag = _MARKUP.search(text) if self.reject_markup and not markup else None
        if tag:
            # Where, not what: a reason reaches shared places (MQTT's error topic, clients'
            # logs), and the tag may hold what the sender meant to keep (a PIN, a name).
            where = " of the piece" if streamed_total is not None else ""
            at = f"a tag at character {tag.start() + 1}{where}"
            how = "send plain text" if where else "send plain text, or SSML starting with <speak>"
            raise TextError(f"markup is not supported ({at}): {how}")
        return text

    def units(self, text: str, custom_dictionary: str | None = None) -> Units:
        """Validated, split and normalized synthesis units; TextError before any audio.
        Text that starts with `<speak` is an SSML document (ssml.py); `custom_dictionary`
        is a request's own pronunciations (lexicon.py), over engine.lexicon's."""
        document = ssml.is_ssml(text) if isinstance(text, str) else False
        self.check(text, markup=document)
        if not text.strip():
            raise TextError("text is empty")
        if document:
            parsed = ssml.parse(text)
            words = (self.max_clause_words, self.first_clause_words)
            units = ssml.document_units(parsed, *words, self.lexicon_for(custom_dictionary))
            spoken = Units(units, parsed.notes)
        else:
            clauses = split_clauses(text, self.max_clause_words, self.first_clause_words)
            spoken = Units(speakable(clauses, self.lexicon_for(custom_dictionary)))
        if not spoken:
            raise TextError("nothing speakable in the text (no letters after clean-up)")
        return spoken

    def lexicon_for(self, custom_dictionary: str | None) -> Lexicon:
        """engine.lexicon with a request's entries over it (LexiconError naming one)."""
        if not custom_dictionary:
            return self.lexicon
        return self.lexicon.with_entries(parse_custom(custom_dictionary))

    def stream(
        self, clock: Callable[[], float] = time.monotonic, custom_dictionary: str | None = None
    ) -> TextStream:
        return TextStream(self, clock, self.lexicon_for(custom_dictionary))


def speakable(clauses: Iterable[str], lexicon: Lexicon | None = None) -> list[str]:
    """Normalized units, without those that hold nothing to pronounce (emoji, symbols).

    A unit's context words (segment.Unit) are normalized with it, so they read the same;
    the lexicon's words become [[ IPA ]] blocks first (normalization keeps blocks).
    """
    said = lexicon.apply if lexicon is not None else (lambda text: text)
    spoken = (
        Unit(
            textmod.normalize(said(c)),
            *(textmod.normalize(said(part)) for part in context_of(c)),
        )
        for c in clauses
    )
    return [c for c in spoken if textmod.has_speakable(c)]


class TextStream:
    """Incremental text (LLM tokens): feed pieces from any thread, iterate units.

    `idle_s()` is the time since the last piece: a stream is idle when its sender went
    quiet, not when it merely has not completed a clause yet.
    """

    def __init__(
        self,
        policy: TextPolicy,
        clock: Callable[[], float] = time.monotonic,
        lexicon: Lexicon | None = None,
    ) -> None:
        self.policy = policy
        self.lexicon = policy.lexicon if lexicon is None else lexicon
        self._clock = clock
        self._splitter = ClauseSplitter(policy.max_clause_words, policy.first_clause_words)
        self._ready: list[str] = []
        self._closed = False
        self._total = 0
        self.units_released = 0
        self.last_piece_at = clock()
        self._cond = threading.Condition()

    def feed(self, piece: str) -> None:
        with self._cond:
            if self._closed:
                raise TextError("text stream already finished")
            self.policy.check(piece, streamed_total=self._total + len(piece))
            self._total += len(piece)
            self.last_piece_at = self._clock()
            self._ready.extend(speakable(self._splitter.feed(piece), self.lexicon))
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            if not self._closed:
                self._ready.extend(speakable(self._splitter.flush(), self.lexicon))
                self._closed = True
                self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def idle_s(self) -> float:
        return self._clock() - self.last_piece_at

    def wake(self) -> None:
        """Wake a reader waiting for text (it re-checks its stop condition)."""
        with self._cond:
            self._cond.notify_all()

    def units(
        self, idle_limit: float | None = None, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[str]:
        """Yield units as they complete; ends when finished, once no piece has come for
        `idle_limit` seconds (then `closed` is still False), or when should_stop()."""
        while True:
            with self._cond:
                while not self._ready and not self._closed:
                    if should_stop is not None and should_stop():
                        return
                    if idle_limit is None:
                        self._cond.wait(0.5 if should_stop else None)
                        continue
                    remaining = idle_limit - self.idle_s()
                    if remaining <= 0:
                        return
                    self._cond.wait(min(remaining, 0.5) if should_stop else remaining)
                if not self._ready or (should_stop is not None and should_stop()):
                    return  # closed and drained, or stopped
                unit = self._ready.pop(0)
                self.units_released += 1
            yield unit

    # The name the first version had; `timeout` is the idle limit.
    def clauses(self, timeout: float | None = None) -> Iterator[str]:
        return self.units(timeout)


class Units(list[str]):
    """An utterance's units, with what its SSML asked for that had no effect (`notes`:
    tag and attribute names, never the text)."""

    def __init__(self, units: Iterable[str] = (), notes: Iterable[str] = ()) -> None:
        super().__init__(units)
        self.notes = tuple(notes)
