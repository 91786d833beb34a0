"""Expand written forms into the words a speaker says, one rule per class of text.

Order matters: the most specific forms go first (links, dates, phone numbers, versions,
durations) so the generic number rule never sees their parts. Every rule pads what it
writes with spaces, so a number never glues to a neighbouring word ("v2" → "v two", never
"vtwo"). Whatever the rules leave that is neither a letter nor basic punctuation becomes a
space: no digit or symbol reaches espeak-ng, which would read it by its character name.

A hand-written normalizer rather than nemo-text-processing: that one needs pynini (a
166 MB wheel; nemo 1.2 pins 2.1.6.post1), transformers and pandas, and compiles its
grammars for minutes; this one costs tens of microseconds per clause.
"""

from __future__ import annotations

import logging
import re
import unicodedata

from anyascii import anyascii

from . import numbers

log = logging.getLogger(__name__)

# -- other scripts -------------------------------------------------------------------------

# Abjads write no vowels: a transliteration is unreadable, so their letters are dropped.
_DROP_SCRIPTS = ("ARABIC", "HEBREW", "SYRIAC", "THAANA", "NKO")


def _script_fix(text: str) -> str:
    """Transliterate letters of scripts an English voice cannot read; drop what fails."""
    if text.isascii():
        return text
    out: list[str] = []
    changed = dropped = 0
    for char in text:
        if not unicodedata.category(char).startswith("L") or _is_latin(char):
            out.append(char)
            continue
        name = unicodedata.name(char, "")
        latin = "" if name.startswith(_DROP_SCRIPTS) else anyascii(char)
        if not latin.strip():
            dropped += 1
            out.append(" ")
            continue
        changed += 1
        # Han, kana and Hangul: one syllable per character, read as separate syllables.
        wide = unicodedata.east_asian_width(char) in "WF"
        out.append(f" {latin.lower()} " if wide else latin)
    if dropped:
        log.warning("dropped %d letters of a script this voice cannot read", dropped)
    if changed:
        log.info("transliterated %d letters of another script", changed)
    return "".join(out)


def _is_latin(char: str) -> bool:
    return char.isascii() or unicodedata.name(char, "").startswith("LATIN")


# -- links, long tokens --------------------------------------------------------------------

_URL = re.compile(r"\b(?:https?://|www\.)(?:www\.)?([\w-]+(?:\.[\w-]+)*)\S*", re.I)
_DOMAIN = re.compile(
    r"\b((?:[\w-]+\.)+(?:com|org|net|io|dev|ai|gov|edu|co|uk|de|fr|info|app|me|tv))\b(?!\.\w)",
    re.I,
)
_EMAIL = re.compile(r"\b([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)\b")
_TOKEN = re.compile(r"\S{33,}")
MAX_WORD_CHARS = 32  # longer than any everyday word; a longer token is a code or a paste


def _dotted(name: str) -> str:
    return " dot ".join(p for p in name.split(".") if p)


def _long_token(match: re.Match[str]) -> str:
    token = match[0]
    words = [w for w in re.split(r"[\W_]+", token) if w]
    if words and all(len(w) <= MAX_WORD_CHARS for w in words):
        return " " + " ".join(words) + " "  # a path or a snake_case name: its words
    if token.isdigit():
        return " a long number "
    if any(c.isdigit() for c in token) or re.fullmatch(r"[0-9a-fA-F]+", token):
        return " a long code "
    return " a long word "


# -- dates and times -----------------------------------------------------------------------

_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_ISO_T = re.compile(r"(?<=\d)T(?=\d{2}:\d{2})")
_SLASH_DATE = re.compile(r"\b(\d{1,2})[/.](\d{1,2})[/.](\d{4}|\d{2})\b")
_DATE_WORDS = (
    r"on|by|until|till|from|since|due|before|after|dated|date|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
)
_CONTEXT_DATE = re.compile(rf"\b({_DATE_WORDS})\s+(\d{{1,2}})/(\d{{1,2}})\b(?!/)", re.I)
_TIME = re.compile(
    r"\b([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?(?:\s?([AaPp])\.?\s?[Mm]\.?(?=\W|$))?"
)
_AMPM = re.compile(r"\b(1[0-2]|0?[1-9])\s?([AaPp])\.?\s?[Mm]\.?(?=\W|$)")
_DURATION = re.compile(
    r"\b(?:(\d+)\s?h(?:rs?)?\s?(\d+)\s?m(?:in)?(?:\s?(\d+)\s?s(?:ec)?)?"
    r"|(\d+)\s?m(?:in)?\s?(\d+)\s?s(?:ec)?)\b"
)


def _date(year: int | None, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    spoken = f" {_MONTHS[month - 1]} {numbers.ordinal(day)}"
    if year is not None:
        spoken += f", {numbers.year(year)}"
    return spoken + " "


def _iso_date(match: re.Match[str]) -> str:
    return _date(int(match[1]), int(match[2]), int(match[3])) or match[0].replace("-", " ")


def _slash_date(match: re.Match[str]) -> str:
    first, second, year = int(match[1]), int(match[2]), int(match[3])
    year += 2000 if len(match[3]) == 2 else 0
    month, day = (second, first) if first > 12 else (first, second)  # en-US: month first
    return _date(year, month, day) or match[0].replace("/", " ")


def _context_date(match: re.Match[str]) -> str:
    spoken = _date(None, int(match[2]), int(match[3]))
    return f"{match[1]}{spoken}" if spoken else match[0]


def _time(match: re.Match[str]) -> str:
    hour, minute, seconds, ampm = int(match[1]), int(match[2]), match[3], match[4]
    if minute == 0:
        spoken = numbers.cardinal(hour) + ("" if ampm else " o'clock")
    elif minute < 10:
        spoken = f"{numbers.cardinal(hour)} oh {numbers.cardinal(minute)}"
    else:
        spoken = f"{numbers.cardinal(hour)} {numbers.cardinal(minute)}"
    if ampm:
        spoken += " a m" if ampm.lower() == "a" else " p m"
    if seconds is not None:
        spoken += f" and {_count(int(seconds), 'second', 'seconds')}"
    return f" {spoken} "


def _count(n: int, one: str, many: str) -> str:
    return f"{numbers.cardinal(n)} {one if n == 1 else many}"


def _duration(match: re.Match[str]) -> str:
    if match[1] is not None:
        parts = [_count(int(match[1]), "hour", "hours"), _count(int(match[2]), "minute", "minutes")]
        if match[3] is not None:
            parts.append(_count(int(match[3]), "second", "seconds"))
    else:
        parts = [
            _count(int(match[4]), "minute", "minutes"),
            _count(int(match[5]), "second", "seconds"),
        ]
    return " " + " and ".join([", ".join(parts[:-1]), parts[-1]]) + " "


# -- phone numbers, versions, codes --------------------------------------------------------

_PHONE = re.compile(
    r"(?<![\w+])(\+\d{1,3}[\s.-]?)?(\(\d{1,5}\)[\s.-]?)?\d{2,5}(?:[\s.-]\d{2,5})+(?![\w])"
)
_VERSION = re.compile(r"(?<![\w.])(?:[vV](?:ersion\s)?\s?(\d+(?:\.\d+)*)|(\d+(?:\.\d+){2,}))\b")
_SERVICE = re.compile(
    r"\b(call|dial|text|ring|phone|pin|code|passcode|flight|extension|ext\.?|zip|"
    r"account|serial|model|order|tracking|confirmation|id)(\s+(?:number\s+|no\.?\s+|#\s?)?)"
    r"(\d{2,12})\b",
    re.I,
)
_LEADING_ZERO = re.compile(r"(?<![\w.,])0\d{2,}\b(?![.,]\d)")
_TIMES = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[x×](?!\w)")
_BY = re.compile(r"(?<![\w.])(\d+)\s?[x×]\s?(\d+)(?![\w.])")
_MIXED = re.compile(r"(?<![.,])\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]+\b")
_RUN = re.compile(r"[A-Za-z]+|\d+")


def _phone(match: re.Match[str]) -> str:
    text = match[0]
    groups = re.findall(r"\d+", text)
    digits = sum(len(g) for g in groups)
    formatted = text.startswith("+") or "(" in text or len(groups) >= 3
    if digits < 7 or digits > 15 or not formatted:
        return text
    spoken = numbers.digit_groups(groups)
    return f" plus {spoken} " if text.startswith("+") else f" {spoken} "


def _version(match: re.Match[str]) -> str:
    if match[1] is not None:
        parts = match[1].split(".")
        return " version " + " point ".join(numbers.cardinal(int(p)) for p in parts) + " "
    return " " + " point ".join(numbers.cardinal(int(p)) for p in match[2].split(".")) + " "


def _mixed(match: re.Match[str]) -> str:
    """RTX4090 → R T X four zero nine zero; COVID19 → COVID nineteen; 5G → five G."""
    words: list[str] = []
    for run in _RUN.findall(match[0]):
        if run.isdigit():
            words.append(numbers.cardinal(int(run)) if len(run) <= 2 else numbers.digits(run))
        elif len(run) <= 3 and (run.isupper() or len(run) == 1):
            words.extend(run.upper())
        else:
            words.append(run)
    return " " + " ".join(words) + " "


# -- quantities ----------------------------------------------------------------------------

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
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"),
    "W": ("watt", "watts"),
    "V": ("volt", "volts"),
    "TB": ("terabyte", "terabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"),
    "KB": ("kilobyte", "kilobytes"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "tbsp": ("tablespoon", "tablespoons"),
    "tsp": ("teaspoon", "teaspoons"),
}
_NUM = r"-?\d+(?:,\d{3})*(?:\.\d+)?(?![.,]?\d)"
_TEMP = re.compile(rf"({_NUM})\s?°\s?([CF])\b")
_DEGREE = re.compile(rf"({_NUM})\s?°")
_PERCENT = re.compile(rf"({_NUM})\s?%")
_CURRENCY = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "sen", "sen"),
    "₹": ("rupee", "rupees", "paisa", "paise"),
}
_CODES = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹"}
_SCALE_WORDS = {"k": "thousand", "K": "thousand", "M": "million", "m": "million"}
_SCALE_WORDS.update({"bn": "billion", "B": "billion", "million": "million"})
_SCALE_WORDS.update({"billion": "billion", "thousand": "thousand", "trillion": "trillion"})
_SCALES = "|".join(sorted(_SCALE_WORDS, key=len, reverse=True))
_MONEY = re.compile(
    rf"([$€£¥₹])\s?(\d+(?:,\d{{3}})*)(?:\.(\d+))?(?:\s?({_SCALES})\b)?(?![\d.,]*\d)"
)
_MONEY_CODE = re.compile(rf"\b(\d+(?:,\d{{3}})*(?:\.\d+)?)\s?({'|'.join(_CODES)})\b")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.I)
_DECADE = re.compile(r"\b(\d{2})?([1-9]0)'?s\b")
_UNIT = re.compile(
    rf"({_NUM})\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/])"
)
_FRACTION = re.compile(r"(?<![\w/.])(\d{1,3})/(\d{1,3})(?![\w/])")
_YEAR = re.compile(r"\b(?:in|since|by|from|of|year)\s+(1[1-9]\d\d|20\d\d)\b", re.I)
_RANGE = re.compile(r"(?<=\d)\s?[-–]\s?(?=\d)")
_NUMBER = re.compile(r"(?:(?<![\w-])-)?(?:\d+(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")
_LONG_NUMBER = re.compile(r"\d{16,}")
_LETTER_HYPHEN_DIGIT = re.compile(r"(?<=[A-Za-z])-(?=\d)|(?<=\d)-(?=[A-Za-z])")


def _speak_number(text: str) -> str:
    return numbers.decimal(text.replace(",", ""))


def _is_one(text: str) -> bool:
    return abs(float(text.replace(",", ""))) == 1


def _money(match: re.Match[str]) -> str:
    one, many, cent, cents = _CURRENCY[match[1]]
    whole_text, frac_text, scale = match[2].replace(",", ""), match[3], match[4]
    if scale:  # $2.5M → two point five million dollars
        amount = whole_text + (f".{frac_text}" if frac_text else "")
        return f" {numbers.decimal(amount)} {_SCALE_WORDS[scale]} {many} "
    whole = int(whole_text)
    spoken = f"{numbers.cardinal(whole)} {one if whole == 1 else many}"
    if frac_text:
        frac = int(frac_text[:2].ljust(2, "0"))
        if frac:
            spoken += f" and {numbers.cardinal(frac)} {cent if frac == 1 else cents}"
    return f" {spoken} "


def _decade(match: re.Match[str]) -> str:
    tens = numbers.cardinal(int(match[2]))
    plural = tens[:-1] + "ies" if tens.endswith("y") else tens + "s"
    return f" {numbers.cardinal(int(match[1]))} {plural} " if match[1] else f" {plural} "


def _by(match: re.Match[str]) -> str:
    return f" {numbers.cardinal(int(match[1]))} by {numbers.cardinal(int(match[2]))} "


def _fraction(match: re.Match[str]) -> str:
    top, bottom = int(match[1]), int(match[2])
    if top >= bottom * 3 or top == bottom:  # 24/7, 50/50: two numbers, not a fraction
        return f" {numbers.cardinal(top)} {numbers.cardinal(bottom)} "
    return f" {numbers.fraction(top, bottom)} "


# -- what is left --------------------------------------------------------------------------

_SYMBOLS = {
    "&": " and ",
    "+": " plus ",
    "=": " equals ",
    "@": " at ",
    "%": " percent ",
    "#": " number ",
}
_HASH_NUMBER = re.compile(r"#\s?(?=\d)")
_SLASH = re.compile(r"(?<=\w)/(?=\w)")
_KEEP_PUNCT = frozenset(".,!?;:'\"-()’‘“”…—–")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:…])")


def _leftovers(text: str) -> str:
    for symbol, spoken in _SYMBOLS.items():
        if symbol in text:
            text = text.replace(symbol, spoken)
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if category[0] in "LM" or char in _KEEP_PUNCT:
            kept.append(char)
        else:
            kept.append(" ")  # digits are all spoken by now; any other symbol is not speech
    return "".join(kept)


def expand(text: str) -> str:
    """Written forms → words. Input is clean text (no markup, no control characters)."""
    text = _script_fix(text)
    text = _URL.sub(lambda m: f" link to {_dotted(m[1])} ", text)
    text = _EMAIL.sub(lambda m: f" {_dotted(m[1])} at {_dotted(m[2])} ", text)
    text = _DOMAIN.sub(lambda m: f" {_dotted(m[1])} ", text)
    text = _TOKEN.sub(_long_token, text)
    text = _LONG_NUMBER.sub(" a long number ", text)
    text = _ISO_T.sub(" at ", text)
    text = _ISO_DATE.sub(_iso_date, text)
    text = _SLASH_DATE.sub(_slash_date, text)
    text = _CONTEXT_DATE.sub(_context_date, text)
    text = _PHONE.sub(_phone, text)
    text = _SERVICE.sub(lambda m: f"{m[1]}{m[2]} {numbers.digits(m[3])} ", text)
    text = _VERSION.sub(_version, text)
    text = _DURATION.sub(_duration, text)
    text = _TEMP.sub(
        lambda m: (
            f" {_speak_number(m[1])} {'degree' if _is_one(m[1]) else 'degrees'} "
            f"{'Celsius' if m[2] == 'C' else 'Fahrenheit'} "
        ),
        text,
    )
    text = _DEGREE.sub(
        lambda m: f" {_speak_number(m[1])} {'degree' if _is_one(m[1]) else 'degrees'} ", text
    )
    text = _TIME.sub(_time, text)
    text = _AMPM.sub(
        lambda m: f" {numbers.cardinal(int(m[1]))} {'a m' if m[2].lower() == 'a' else 'p m'} ",
        text,
    )
    text = _PERCENT.sub(lambda m: f" {_speak_number(m[1])} percent ", text)
    text = _MONEY_CODE.sub(lambda m: f"{_CODES[m[2]]}{m[1]}", text)
    text = _MONEY.sub(_money, text)
    text = _ORDINAL.sub(lambda m: f" {numbers.ordinal(int(m[1]))} ", text)
    text = _DECADE.sub(_decade, text)
    text = _UNIT.sub(
        lambda m: f" {_speak_number(m[1])} {_UNITS[m[2]][0 if _is_one(m[1]) else 1]} ", text
    )
    text = _FRACTION.sub(_fraction, text)
    text = _YEAR.sub(lambda m: m[0][: -len(m[1])] + numbers.year(int(m[1])) + " ", text)
    text = _LEADING_ZERO.sub(lambda m: f" {numbers.digits(m[0])} ", text)
    text = _BY.sub(_by, text)
    text = _TIMES.sub(lambda m: f" {_speak_number(m[1])} times ", text)
    text = _MIXED.sub(_mixed, text)
    text = _LETTER_HYPHEN_DIGIT.sub(" ", text)
    text = _RANGE.sub(" to ", text)
    text = _HASH_NUMBER.sub(" number ", text)
    text = _NUMBER.sub(lambda m: f" {_speak_number(m[0])} ", text)
    text = _SLASH.sub(" ", text)
    text = _leftovers(text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACE.sub(" ", text))
    return text.strip()
