"""SSML: a document (text that starts with `<speak`, Riva's rule) parsed into segments.

A segment is a run of text spoken one way: its rate and gain, the silence before it (a
`break`), its marks. The text policy splits each segment into units as it splits plain
text (so the first unit, and so the first audio, is as short as plain text's), and the
engine speaks them: a break is silence yielded between units (never a wait), a rate a
speed multiplier of the unit's frontend, a volume a gain, `say-as`, `sub` and `phoneme`
words the normalizer and phonemizer read ([[ ipa ]] for `phoneme`).

Parsing is safe and bounded: defusedxml refuses any DTD (so entity bombs and external
entities fail at once), the text policy's length limit holds before parsing, and nesting
deeper than MAX_DEPTH is refused before it is walked. What is accepted without effect
(`pitch` on a voice that cannot change it, an unknown tag or attribute value) is spoken
as text and reported in `notes`: tag and attribute names only, never the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from ..errors import TextError
from .lexicon import Lexicon
from .normalize import has_speakable, normalize
from .sayas import known, say_as
from .segment import ClauseSplitter, Prosody, Unit, context_of, spoken_words

MAX_DEPTH = 32
MAX_BREAK_S = 10.0
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"  # a mark's place in a segment's text
_PRIVATE = re.compile(f"[{MARK_OPEN}{MARK_CLOSE}]")
_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*", re.I)
_PERCENT = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*%\s*")
_DB = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*dB\s*", re.I)
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s*$")
STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.4, "strong": 0.75}
STRENGTHS["x-strong"] = 1.2
RATES = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.6}
VOLUMES_DB = {"silent": None, "x-soft": -12.0, "soft": -6.0, "medium": 0.0, "default": 0.0}
VOLUMES_DB |= {"loud": 4.0, "x-loud": 8.0}
MIN_RATE, MAX_RATE = 0.25, 4.0
MAX_GAIN = 4.0  # +12 dB; the samples clip beyond full scale anyway


class SsmlError(TextError):
    """A document that cannot be read: not well-formed, unsafe, too deep, a bad value.
    Its reason starts with "SSML" (the daemon reads its refusal code from it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason if reason.startswith("SSML") else f"SSML: {reason}")


_PROLOG = re.compile(r"\s*(?:<\?xml[^>]{0,200}\?>\s*)?(<speak|<!DOCTYPE)")


def is_ssml(text: str) -> bool:
    """A document: `<speak` first (Riva's rule), after an XML declaration if any; a
    DOCTYPE there too, so that it is refused as SSML with its reason."""
    return _PROLOG.match(text) is not None


@dataclass
class Segment:
    text: str = ""
    rate: float = 1.0
    gain: float = 1.0
    pause_s: float = 0.0  # silence before it
    marks: list[str] = field(default_factory=list)  # names; their places are in text


@dataclass
class Document:
    segments: list[Segment]
    tail_s: float = 0.0  # silence after the last segment
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Style:
    rate: float = 1.0
    gain: float = 1.0


def parse(text: str) -> Document:
    """The document's segments, or SsmlError saying where it is wrong."""
    try:
        root = fromstring(text, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise SsmlError("SSML refused: DTDs and entity declarations are not allowed") from None
    except ParseError as exc:
        line, column = exc.position
        what = str(exc).split(":")[0]
        raise SsmlError(
            f"SSML is not well-formed XML ({what} at line {line}, column {column + 1})"
        ) from None
    _check_depth(root)
    if _tag(root) != "speak":
        raise SsmlError("SSML must have <speak> as its root element")
    reader = _Reader()
    reader.children(root, _Style())
    return reader.document()


def _check_depth(root: Element) -> None:
    """Refuse deep nesting iteratively, before anything recurses into it."""
    stack = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SsmlError(f"SSML nested deeper than {MAX_DEPTH} elements")
        stack.extend((child, depth + 1) for child in element)


def _tag(element: Element) -> str:
    tag = element.tag if isinstance(element.tag, str) else ""
    return tag.rsplit("}", 1)[-1]  # without a namespace


class _Reader:
    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.current: Segment | None = None
        self.pause = 0.0
        self.notes: list[str] = []

    def document(self) -> Document:
        self._close()
        return Document(self.segments, self.pause, self.notes)

    def note(self, note: str) -> None:
        if note not in self.notes and len(self.notes) < 20:
            self.notes.append(note)

    # -- text ----------------------------------------------------------------------------

    def text(self, text: str | None, style: _Style) -> None:
        if not text:
            return
        text = _PRIVATE.sub("", text)
        current = self.current
        if current is None or (current.rate, current.gain) != (style.rate, style.gain):
            if current is not None and not text.strip():
                current.text += text  # whitespace between two styles: no new segment
                return
            self._close()
            self.current = current = Segment(rate=style.rate, gain=style.gain)
        current.text += text

    def _close(self) -> None:
        """End the current segment; the pause so far goes before the next one."""
        current = self.current
        if current is not None and (current.text.strip() or current.marks):
            current.pause_s, self.pause = self.pause, 0.0
            self.segments.append(current)
        self.current = None

    def sentence_end(self) -> None:
        current = self.current
        if current is not None and current.text.strip():
            body = current.text.rstrip()
            if not _SENTENCE_END.search(body):
                body = body.rstrip(",;:") + "."
            current.text = body + " "

    def pause_for(self, seconds: float) -> None:
        self._close()
        self.pause = min(self.pause + seconds, MAX_BREAK_S)

    def mark(self, name: str, style: _Style) -> None:
        if self.current is None:
            self.current = Segment(rate=style.rate, gain=style.gain)
        index = len(self.current.marks)
        self.current.marks.append(name)
        self.current.text += f" {MARK_OPEN}{index}{MARK_CLOSE} "

    # -- elements ------------------------------------------------------------------------

    def children(self, element: Element, style: _Style) -> None:
        self.text(element.text, style)
        for child in element:
            self.element(child, style)
            self.text(child.tail, style)

    def element(self, element: Element, style: _Style) -> None:
        tag = _tag(element)
        if tag in ("p", "s", "paragraph", "sentence"):
            self.sentence_end()
            self.children(element, style)
            self.sentence_end()
        elif tag == "break":
            self.pause_for(_break_s(element))
        elif tag == "prosody":
            self.children(element, self._prosody(element, style))
        elif tag == "say-as":
            self._say_as(element, style)
        elif tag == "sub":
            alias = element.get("alias")
            if alias is None:
                raise SsmlError("<sub> needs an alias attribute")
            self.text(f" {alias} ", style)
        elif tag == "phoneme":
            self._phoneme(element, style)
        elif tag == "mark":
            self.mark(element.get("name", ""), style)
        elif tag == "emphasis":
            self.children(element, style)  # accepted: the voice has no emphasis control
        else:
            self.note(f"unknown tag <{tag}>: its text is spoken")
            self.children(element, style)

    def _prosody(self, element: Element, style: _Style) -> _Style:
        rate, gain = style.rate, style.gain
        if (value := element.get("rate")) is not None:
            rate = min(max(rate * _rate(value), MIN_RATE), MAX_RATE)
        if (value := element.get("volume")) is not None:
            gain = min(gain * _gain(value), MAX_GAIN)
        if element.get("pitch") is not None or element.get("contour") is not None:
            self.note("prosody pitch ignored: the voice cannot change its pitch")
        return _Style(rate, gain)

    def _say_as(self, element: Element, style: _Style) -> None:
        kind = element.get("interpret-as", "")
        written = "".join(element.itertext())
        spoken = say_as(written, kind, element.get("format")) if kind else None
        if spoken is None:
            what = f"say-as {kind!r} unknown" if not known(kind) else f"say-as {kind!r} not read"
            self.note(f"{what}: the text is read as written")
            spoken = written
        self.text(f" {spoken} ", style)

    def _phoneme(self, element: Element, style: _Style) -> None:
        alphabet = (element.get("alphabet") or "ipa").lower()
        ph = (element.get("ph") or "").replace("[", "").replace("]", "").strip()
        if alphabet != "ipa" or not ph:
            self.note(f"phoneme alphabet {alphabet!r} or empty ph: the text is read as written")
            self.children(element, style)
            return
        self.text(f" [[ {ph} ]] ", style)


def _break_s(element: Element) -> float:
    value = element.get("time")
    if value is not None:
        match = _TIME.fullmatch(value)
        if match is None:
            raise SsmlError('<break> time must look like "500ms" or "1.5s"')
        seconds = float(match[1]) / (1000.0 if match[2].lower() == "ms" else 1.0)
        return min(seconds, MAX_BREAK_S)
    strength = element.get("strength", "medium").lower()
    if strength not in STRENGTHS:
        raise SsmlError(f"<break> strength must be one of {', '.join(STRENGTHS)}")
    return STRENGTHS[strength]


def _rate(value: str) -> float:
    if value.lower() in RATES:
        return RATES[value.lower()]
    match = _PERCENT.fullmatch(value)
    if match is None:
        raise SsmlError('prosody rate must be a percentage ("80%", "+20%") or x-slow..x-fast')
    number = float(match[1])
    rate = 1.0 + number / 100.0 if match[1][0] in "+-" else number / 100.0
    if rate <= 0:
        raise SsmlError("prosody rate must be above 0%")
    return rate


def _gain(value: str) -> float:
    if value.lower() in VOLUMES_DB:
        db = VOLUMES_DB[value.lower()]
        return 0.0 if db is None else 10.0 ** (db / 20.0)
    match = _DB.fullmatch(value)
    if match is None:
        raise SsmlError('prosody volume must be in dB ("+6dB", "-3dB") or silent..x-loud')
    return 10.0 ** (float(match[1]) / 20.0)


# -- segments into units ----------------------------------------------------------------

_MARK = re.compile(f"\\s*{MARK_OPEN}(\\d+){MARK_CLOSE}\\s*")


def document_units(
    document: Document, max_words: int, first_words: int, lexicon: Lexicon | None = None
) -> list[Unit]:
    """The document's units: each segment split as plain text is (the first unit as
    short), normalized, its prosody attached. A unit with nothing to say passes its
    pause and marks on to the next; marks after the last word go on the last unit."""
    said = lexicon.apply if lexicon is not None else (lambda text: text)
    units: list[Unit] = []
    pause, marks = 0.0, []  # what waits for the next unit that speaks
    for segment in document.segments:
        pause += segment.pause_s
        splitter = ClauseSplitter(max_words, first_words if not units else 0)
        raw = [*splitter.feed(segment.text), *splitter.flush()]
        for clause in raw:
            text, here = _unmarked(clause, segment.marks, said)
            before, after = (normalize(said(_MARK.sub(" ", p))) for p in context_of(clause))
            spoken = Unit(normalize(text), before, after)
            if not has_speakable(spoken):
                marks.extend(name for _, name in here)
                continue
            placed = [(0, name) for name in marks] + here
            prosody = Prosody(pause, segment.rate, segment.gain, marks=tuple(placed))
            units.append(Unit(spoken, spoken.before, spoken.after, prosody))
            pause, marks = 0.0, []
        if not raw:
            marks.extend(segment.marks)
    if units:
        last = units[-1]
        words = len(spoken_words(last))
        tail = replace(
            last.prosody,
            tail_s=min(pause + document.tail_s, MAX_BREAK_S),
            marks=(*last.prosody.marks, *((words, name) for name in marks)),
        )
        units[-1] = Unit(last, last.before, last.after, tail)
    return units


def _unmarked(
    clause: str, names: list[str], said: Callable[[str], str]
) -> tuple[str, list[tuple[int, str]]]:
    """A clause without its mark places, and each mark's word index in its normalized
    text (normalization rewrites numbers and abbreviations: counted after it)."""
    placed: list[tuple[int, str]] = []
    pieces: list[str] = []
    position = 0
    for match in _MARK.finditer(clause):
        pieces.append(clause[position : match.start()])
        before = normalize(said(" ".join(pieces)))
        placed.append((len(spoken_words(before)), names[int(match[1])]))
        position = match.end()
    pieces.append(clause[position:])
    return said(" ".join(p.strip() for p in pieces if p.strip())), placed
