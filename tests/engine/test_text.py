"""Text normalization and clause segmentation (pure functions, no model)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from magpie_tts.engine.text import numbers
from magpie_tts.engine.text.normalize import clean, has_speakable, normalize
from magpie_tts.engine.text.policy import TextPolicy
from magpie_tts.engine.text.segment import ClauseSplitter, context_of, split_clauses


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("It is 22°C outside.", "It is twenty-two degrees Celsius outside."),
        ("Low of -3.5°F", "Low of minus three point five degrees Fahrenheit"),
        ("Wake me at 6:30", "Wake me at six thirty"),
        ("Meet at 7:05 pm", "Meet at seven oh five p m"),
        ("Dinner at 6:00", "Dinner at six o'clock"),
        ("Call Dr. Smith", "Call Doctor Smith"),
        ("Battery at 50%", "Battery at fifty percent"),
        ("It costs $5.50", "It costs five dollars and fifty cents"),
        ("Drive 3.5 km", "Drive three point five kilometers"),
        ("Limit 100 km/h", "Limit one hundred kilometers per hour"),
        ("on the 21st floor", "on the twenty-first floor"),
        ("born in 1984", "born in nineteen eighty-four"),
        ("1,234 steps", "one thousand two hundred thirty-four steps"),
        ("Tom & Jerry", "Tom and Jerry"),
        ("5 min left", "five minutes left"),
    ],
)
def test_normalize_smart_speaker_phrases(raw: str, spoken: str) -> None:
    assert normalize(raw) == spoken


def test_markup_and_control_characters_are_removed() -> None:
    assert clean("<speak>Hi <b>there</b></speak>\x07\x1b 😀") == "Hi there"
    assert normalize("a&amp;b") == "a and b"


def test_inline_phonemes_pass_through_unchanged() -> None:
    assert normalize("Say [[ həlˈoʊ ]] 2 times") == "Say [[ həlˈoʊ ]] two times"


def test_nothing_speakable() -> None:
    assert not has_speakable(clean("😀 🎉 <b></b> \x00"))
    assert has_speakable("[[ a ]]")


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "zero"),
        (13, "thirteen"),
        (40, "forty"),
        (99, "ninety-nine"),
        (101, "one hundred one"),
        (2_000_005, "two million five"),
    ],
)
def test_cardinal(n: int, words: str) -> None:
    assert numbers.cardinal(n) == words


def test_ordinal() -> None:
    assert [numbers.ordinal(n) for n in (1, 2, 3, 12, 20, 42)] == [
        "first",
        "second",
        "third",
        "twelfth",
        "twentieth",
        "forty-second",
    ]


def test_first_unit_is_a_clause_then_whole_sentences() -> None:
    text = 'Hello there, Dr. Smith. J. R. wrote it; e.g. this! He said "no." Next\nline'
    assert split_clauses(text) == [
        "Hello there,",
        "Dr. Smith.",
        "J. R. wrote it; e.g. this!",
        'He said "no."',
        "Next",
        "line",
    ]
    assert split_clauses(text, first_words=0)[0] == "Hello there, Dr. Smith."


def test_a_long_sentence_ends_its_unit_at_its_last_clause_boundary() -> None:
    first = "Okay."
    long = (
        "The forecast for today, which covers the whole region, says it stays dry, "
        "although the wind picks up in the evening and showers may follow overnight "
        "along the coast."
    )
    assert split_clauses(f"{first} {long}") == [
        first,
        "The forecast for today, which covers the whole region, says it stays dry,",
        "although the wind picks up in the evening and showers may follow overnight "
        "along the coast.",
    ]


def test_inline_phonemes_are_never_split() -> None:
    text = "Say [[ hɛˈloʊ, wˈɜːld. ]] now, please."
    assert split_clauses(text) == ["Say [[ hɛˈloʊ, wˈɜːld. ]] now,", "please."]
    splitter = ClauseSplitter()
    assert list(splitter.feed("Say [[ hɛˈloʊ, ")) == []  # block still open
    assert list(splitter.feed("wˈɜːld. ]] now, ")) == ["Say [[ hɛˈloʊ, wˈɜːld. ]] now,"]


def test_long_run_on_text_is_cut_at_max_words() -> None:
    words = " ".join(f"w{i}" for i in range(45))
    clauses = split_clauses(words, max_words=20, first_words=0)
    assert [len(c.split()) for c in clauses] == [20, 25]  # 25 ≤ 20 + 20 // 3: left whole
    clauses = split_clauses(words + " more words here", max_words=20, first_words=0)
    assert [len(c.split()) for c in clauses] == [20, 20, 8]


def test_short_sentences_are_not_cut() -> None:
    text = "Your timer for the pasta is done."  # 7 words: within the first clause's reach
    assert split_clauses(text, first_words=6) == [text]
    text = "Your timer for the pasta is almost done, okay?"
    assert split_clauses(text, first_words=6) == [
        "Your timer for the pasta is almost done,",
        "okay?",
    ]


def test_first_clause_is_short_and_cut_before_a_function_word() -> None:
    text = (
        "The weather in Boston stays mostly sunny with a gentle breeze from the west "
        "and temperatures near seventy degrees."
    )
    clauses = split_clauses(text, max_words=20, first_words=6)
    assert clauses[0] == "The weather in Boston stays mostly sunny"  # cut before "with"
    assert " ".join(clauses) == text


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(st.sampled_from([*'ab .,;!?\n"Dr', " and ", " with ", "word "]), max_size=40).map(
        "".join
    ),
    cuts=st.lists(st.integers(0, 80), max_size=10),
)
def test_incremental_splitting_equals_whole_text(text: str, cuts: list[int]) -> None:
    splitter = ClauseSplitter(max_words=5, first_words=3)
    pieces, last = [], 0
    for cut in sorted(c for c in cuts if c <= len(text)):
        pieces.append(text[last:cut])
        last = cut
    pieces.append(text[last:])
    streamed = [c for piece in pieces for c in splitter.feed(piece)]
    streamed += list(splitter.flush())
    whole = split_clauses(text, max_words=5, first_words=3)
    assert streamed == whole
    assert [context_of(u) for u in streamed] == [context_of(u) for u in whole]


def test_a_unit_cut_between_words_carries_the_words_around_the_cut() -> None:
    text = (
        "Tomorrow will be mostly cloudy with a chance of showers in the afternoon. "
        "Then it clears, and the night is cold."
    )
    first, second, third = TextPolicy().units(text)
    assert (first, first.before, first.after) == (
        "Tomorrow will be mostly cloudy with a chance",
        "",
        "of showers in",
    )
    assert (second.before, second.after) == ("with a chance", "")
    assert context_of(third) == ("", "")  # a sentence boundary is a real pause
    # a first clause ended by a comma pauses there: no context either
    assert [context_of(u) for u in TextPolicy().units("Good morning, the sun is out.")] == [
        ("", ""),
        ("", ""),
    ]
    # context is normalized like the unit it goes with
    cut = TextPolicy().units(
        "Set the oven to two hundred degrees with 3 trays and wait ten minutes."
    )
    assert cut[0].after == "with three trays"


def test_a_short_sentence_keeps_its_prosody_whole() -> None:
    text = "Your package will arrive on Friday between noon and four."  # 10 words
    assert split_clauses(text, first_words=6) == [text]
