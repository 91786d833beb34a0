"""Text clean-up and normalization into words espeak-ng reads the way a speaker should.

Covers what a smart speaker says every day: temperatures, clock times, percentages,
money, units, ordinals, common abbreviations. Markup and control characters are removed.
"""

from __future__ import annotations

import html
import re
import unicodedata

from . import numbers
from .errors import TextError

MAX_TEXT_CHARS = 20_000

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

_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "in": ("inch", "inches"),
    "h": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "min": ("minute", "minutes"),
    "s": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"),
    "W": ("watt", "watts"),
    "V": ("volt", "volts"),
    "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"),
    "Hz": ("hertz", "hertz"),
}
_NUM = r"-?\d+(?:[.,]\d+)*"
_TEMP_RE = re.compile(rf"({_NUM})\s?°\s?([CF])\b")
_DEGREE_RE = re.compile(rf"({_NUM})\s?°")
_TIME_RE = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)(?:\s?([AaPp])\.?\s?[Mm]\.?(?=\W|$))?")
_AMPM_RE = re.compile(r"\b(1[0-2]|0?[1-9])\s?([AaPp])\.?\s?[Mm]\.?(?=\W|$)")
_PERCENT_RE = re.compile(rf"({_NUM})\s?%")
_MONEY_RE = re.compile(r"([$€£])\s?(\d+(?:,\d{3})*)(?:\.(\d{1,2}))?\b")
_ORDINAL_RE = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.I)
_UNIT_RE = re.compile(
    rf"({_NUM})\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/])"
)
_YEAR_RE = re.compile(r"\b(?:in|since|by|from|of|year)\s+(1[1-9]\d\d|20\d\d)\b", re.I)
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
_CURRENCY = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
}


def _number_value(text: str) -> float:
    return float(text.replace(",", ""))


def _speak_number(text: str) -> str:
    return numbers.decimal(text.replace(",", ""))


def _plural(value_text: str, forms: tuple[str, str]) -> str:
    return forms[0] if abs(_number_value(value_text)) == 1 else forms[1]


def _time(match: re.Match[str]) -> str:
    hour, minute, ampm = int(match[1]), int(match[2]), match[3]
    if minute == 0:
        spoken = numbers.cardinal(hour) + ("" if ampm else " o'clock")
    elif minute < 10:
        spoken = f"{numbers.cardinal(hour)} oh {numbers.cardinal(minute)}"
    else:
        spoken = f"{numbers.cardinal(hour)} {numbers.cardinal(minute)}"
    if ampm:
        spoken += " a m" if ampm.lower() == "a" else " p m"
    return spoken


def _money(match: re.Match[str]) -> str:
    one, many, cent, cents = _CURRENCY[match[1]]
    whole = int(match[2].replace(",", ""))
    spoken = f"{numbers.cardinal(whole)} {one if whole == 1 else many}"
    if match[3]:
        frac = int(match[3].ljust(2, "0"))
        if frac:
            spoken += f" and {numbers.cardinal(frac)} {cent if frac == 1 else cents}"
    return spoken


def _temperature(match: re.Match[str]) -> str:
    scale = "Celsius" if match[2] == "C" else "Fahrenheit"
    value = match[1]
    return f"{_speak_number(value)} {_plural(value, ('degree', 'degrees'))} {scale}"


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
    """Clean and expand text into speakable words. Inline [[ phonemes ]] pass untouched."""
    if len(text) > MAX_TEXT_CHARS:
        raise TextError(f"text too long: {len(text)} characters (limit {MAX_TEXT_CHARS})")
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
    text = _TEMP_RE.sub(_temperature, text)
    text = _DEGREE_RE.sub(
        lambda m: f"{_speak_number(m[1])} {_plural(m[1], ('degree', 'degrees'))}", text
    )
    text = _TIME_RE.sub(_time, text)
    text = _AMPM_RE.sub(
        lambda m: f"{numbers.cardinal(int(m[1]))} {'a m' if m[2].lower() == 'a' else 'p m'}",
        text,
    )
    text = _PERCENT_RE.sub(lambda m: f"{_speak_number(m[1])} percent", text)
    text = _MONEY_RE.sub(_money, text)
    text = _ORDINAL_RE.sub(lambda m: numbers.ordinal(int(m[1])), text)
    text = _UNIT_RE.sub(lambda m: f"{_speak_number(m[1])} {_plural(m[1], _UNITS[m[2]])}", text)
    text = _YEAR_RE.sub(lambda m: m[0][: -len(m[1])] + numbers.year(int(m[1])), text)
    text = _NUMBER_RE.sub(lambda m: _speak_number(m[0]), text)
    text = text.replace("&", " and ").replace("+", " plus ").replace("=", " equals ")
    return _SPACE.sub(" ", text).strip()


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
