"""Text clean-up and normalization into words espeak-ng reads the way a speaker should.

Markup and control characters are removed here and abbreviations expanded; the written
forms (dates, times, numbers, phone numbers, links...) are verbalized by `verbalize`.
"""

from __future__ import annotations

import html
import re
import unicodedata

from . import verbalize

_TAG = re.compile(r"<[^<>]{0,200}>")
_PHONEME_BLOCK = re.compile(r"\[\[.*?\]\]", re.S)
_SPACE = re.compile(r"\s+")

_ABBREVIATIONS = {
    "Dr.": "Doctor",
    "Mr.": "Mister",
    "Mrs.": "Missus",
    "Ms.": "Miz",
    "Prof.": "Professor",
    "St.": "Saint",
    "Jr.": "Junior",
    "Sr.": "Senior",
    "vs.": "versus",
    "etc.": "et cetera",
    "e.g.": "for example",
    "i.e.": "that is",
    "approx.": "approximately",
    "No.": "number",
    "Mt.": "Mount",
    "Ave.": "Avenue",
    "Rd.": "Road",
    "min.": "minutes",
    "sec.": "seconds",
    "Jan.": "January",
    "Feb.": "February",
    "Aug.": "August",
    "Sept.": "September",
    "Oct.": "October",
    "Nov.": "November",
    "Dec.": "December",
}
_ABBREV_RE = re.compile(
    r"(?<!\w)("
    + "|".join(re.escape(a) for a in sorted(_ABBREVIATIONS, key=len, reverse=True))
    + r")(?=\s|$)"
)


def clean(text: str) -> str:
    """Remove what must never be spoken: markup, control characters, emoji, odd spacing."""
    text = unicodedata.normalize("NFC", html.unescape(_TAG.sub(" ", text)))
    kept: list[str] = []
    for char in text:
        category = unicodedata.category(char)
        if char in "\n\t\r" or category[0] == "C" or (category in ("So", "Sk") and char != "°"):
            kept.append(" ")
        else:
            kept.append(char)
    return _SPACE.sub(" ", "".join(kept)).strip()


def normalize(text: str) -> str:
    """Clean and expand text into speakable words. Inline [[ phonemes ]] pass untouched.

    Length and content limits are the text policy's (policy.py), checked before this.
    """
    parts = _PHONEME_BLOCK.split(text)
    blocks = _PHONEME_BLOCK.findall(text)
    out: list[str] = []
    for index, part in enumerate(parts):
        out.append(_expand(clean(part)))
        if index < len(blocks):
            out.append(blocks[index])
    return _SPACE.sub(" ", " ".join(p for p in out if p)).strip()


def _expand(text: str) -> str:
    if not text:
        return ""
    text = _ABBREV_RE.sub(lambda m: _ABBREVIATIONS[m[1]], text)
    return verbalize.expand(text)


_INITIAL = re.compile(r"(?:^|\s)[A-Z]$")


def abbreviation_before(text: str, dot_index: int) -> bool:
    """True if the '.' at dot_index ends a known abbreviation or an initial ("J.")."""
    head = text[max(0, dot_index - 12) : dot_index + 1]
    word = head.rsplit(None, 1)[-1] if head.strip() else ""
    return word in _ABBREVIATIONS or bool(_INITIAL.search(text[max(0, dot_index - 2) : dot_index]))


def has_speakable(text: str) -> bool:
    """True if the text holds at least one letter or an inline phoneme block."""
    if _PHONEME_BLOCK.search(text):
        return True
    return any(unicodedata.category(c)[0] == "L" for c in text)
