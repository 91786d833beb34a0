"""English number words, small enough to own instead of a dependency."""

_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_EXCEPTIONS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def _below_thousand(n: int) -> str:
    words: list[str] = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def cardinal(n: int) -> str:
    if n < 0:
        return "minus " + cardinal(-n)
    if n >= 10**15:
        return " ".join(_ONES[int(d)] for d in str(n))
    words: list[str] = []
    for value, name in _SCALES:
        if n >= value:
            words += [cardinal(n // value), name]
            n %= value
    if n or not words:
        words.append(_below_thousand(n))
    return " ".join(words)


def ordinal(n: int) -> str:
    words = cardinal(n)
    head, sep, last = words.rpartition(" ")
    if "-" in last:
        tens, _, unit = last.rpartition("-")
        last = f"{tens}-{_ordinal_word(unit)}"
    else:
        last = _ordinal_word(last)
    return f"{head}{sep}{last}"


def _ordinal_word(word: str) -> str:
    if word in _ORDINAL_EXCEPTIONS:
        return _ORDINAL_EXCEPTIONS[word]
    if word.endswith("y"):
        return word[:-1] + "ieth"
    return word + "th"


def digits(text: str) -> str:
    """Read a digit string one digit at a time ("05" → "zero five")."""
    return " ".join(_ONES[int(d)] for d in text)


def decimal(text: str) -> str:
    """'3.14' → 'three point one four'; '-2' → 'minus two'."""
    sign = ""
    if text.startswith("-"):
        sign, text = "minus ", text[1:]
    whole, _, frac = text.partition(".")
    spoken = cardinal(int(whole.replace(",", "") or "0"))
    if frac:
        spoken += " point " + digits(frac)
    return sign + spoken


def year(n: int) -> str:
    """1984 → nineteen eighty-four; 2005 → two thousand five; 2021 → twenty twenty-one."""
    if 2000 <= n <= 2009 or n % 1000 == 0 or not 1100 <= n <= 2099:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{cardinal(high)} hundred"
    return f"{cardinal(high)} {'oh ' + cardinal(low) if low < 10 else cardinal(low)}"


_DENOMINATORS = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def fraction(numerator: int, denominator: int) -> str:
    """3/4 → 'three quarters'; 1/2 → 'one half'; 5/8 → 'five eighths'; 7/250 → '… over …'."""
    if denominator == 0 or denominator > 20:
        return f"{cardinal(numerator)} over {cardinal(denominator)}"
    if denominator == 1:
        return cardinal(numerator)
    one, many = _DENOMINATORS.get(denominator, (ordinal(denominator), ordinal(denominator) + "s"))
    return f"{cardinal(numerator)} {one if numerator == 1 else many}"


def digit_groups(groups: list[str]) -> str:
    """Phone numbers and codes: digit by digit, a pause (comma) between groups."""
    return ", ".join(digits(g) for g in groups if g)
