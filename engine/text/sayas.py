"""SSML `say-as`: how a written form is read, as words the normalizer passes through.

Each reading returns plain words (or None: the text is not that form, and is read as
written). Letters are spelled with their names ("ay", "bee"), not as bare letters:
espeak-ng reads a lone "A" as the article.
"""

from __future__ import annotations

import re

from . import numbers

LETTERS = dict(
    zip(
        "abcdefghijklmnopqrstuvwxyz",
        (
            "eigh bee see dee ee eff gee aitch eye jay kay el em en oh pee cue ar ess tee you "
            "vee double-you ex why zee"
        ).split(),
        strict=True,
    )
)
SYMBOLS = {
    "-": "dash",
    ".": "dot",
    "@": "at",
    "_": "underscore",
    "/": "slash",
    "+": "plus",
    "#": "hash",
    "&": "and",
    "*": "star",
    "%": "percent",
}
MONTHS = (
    "January February March April May June July August September October November December"
).split()
_MONTH_PREFIX = {m[:3].lower(): i for i, m in enumerate(MONTHS, start=1)}
DATE_FORMATS = ("mdy", "dmy", "ymd", "md", "dm", "ym", "my", "d", "m", "y")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


def characters(text: str) -> str:
    """Letter by letter, digit by digit; a space is a short pause."""
    words: list[str] = []
    for char in text:
        lower = char.lower()
        if lower in LETTERS:
            words.append(LETTERS[lower])
        elif char.isdigit():
            words.append(numbers.digits(char))
        elif char in SYMBOLS:
            words.append(SYMBOLS[char])
        elif char.isspace() and words and not words[-1].endswith(","):
            words[-1] += ","
    return " ".join(words).rstrip(",")


def cardinal(text: str) -> str | None:
    match = _NUMBER.fullmatch(text.strip())
    if match is None:
        return None
    return numbers.decimal(match[0].lstrip("+").replace(",", ""))


def ordinal(text: str) -> str | None:
    match = re.fullmatch(r"(\d[\d,]*)(?:st|nd|rd|th|\.)?", text.strip(), re.I)
    if match is None:
        return None
    return numbers.ordinal(int(match[1].replace(",", "")))


def digits(text: str) -> str | None:
    found = re.sub(r"\D", "", text)
    return numbers.digits(found) if found else None


def telephone(text: str) -> str | None:
    """Digit by digit, a pause between the groups as written; "+" read as "plus"."""
    groups = re.findall(r"\d+", text)
    if not groups:
        return None
    spoken = numbers.digit_groups(groups)
    return f"plus {spoken}" if text.strip().startswith("+") else spoken


def time(text: str) -> str | None:
    """ "14:30", "1430", "2:05 pm": as the normalizer reads clock times."""
    value = text.strip()
    match = re.fullmatch(r"(\d{1,2})(\d{2})(\s*[ap]\.?m\.?)?", value, re.I)
    if match is not None:
        value = f"{match[1]}:{match[2]}{match[3] or ''}"
    return value if re.match(r"\d{1,2}:\d{2}", value) else None


def date(text: str, fmt: str | None) -> str | None:
    """A date read in `format` (W3C's say-as note: mdy, dmy, ymd, md, dm, ym, my, d, m,
    y; default mdy, or ymd for a four-digit first field)."""
    fields = re.findall(r"\d+|[A-Za-z]+", text)
    if not fields:
        return None
    order = (fmt or "").lower()
    if order not in DATE_FORMATS:
        order = "ymd" if len(fields[0]) == 4 and fields[0].isdigit() else "mdy"
    if len(fields) != len(order):
        return None
    year = month = day = None
    for field, kind in zip(fields, order, strict=True):
        if kind == "m":
            month = _month(field)
        elif not field.isdigit():
            return None
        elif kind == "d":
            day = int(field)
        else:
            year = int(field) + (2000 if len(field) == 2 else 0)
    if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
        return None
    parts = []
    if month is not None:
        parts.append(MONTHS[month - 1])
    if day is not None:
        parts.append(numbers.ordinal(day) if month is not None else f"the {numbers.ordinal(day)}")
    spoken = " ".join(parts)
    if year is not None:
        spoken = f"{spoken}, {numbers.year(year)}" if spoken else numbers.year(year)
    return spoken


def _month(field: str) -> int | None:
    if field.isdigit():
        return int(field)
    return _MONTH_PREFIX.get(field[:3].lower())


READINGS = {
    "characters": characters,
    "spell-out": characters,
    "verbatim": characters,
    "cardinal": cardinal,
    "number": cardinal,
    "ordinal": ordinal,
    "digits": digits,
    "telephone": telephone,
    "time": time,
}


def say_as(text: str, interpret_as: str, fmt: str | None) -> str | None:
    """`text` read as `interpret_as`; None where that reading is unknown or does not fit."""
    kind = interpret_as.strip().lower()
    if kind == "date":
        return date(text, fmt)
    reading = READINGS.get(kind)
    return reading(text) if reading else None


def known(interpret_as: str) -> bool:
    return interpret_as.strip().lower() in READINGS or interpret_as.strip().lower() == "date"
