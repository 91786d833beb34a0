"""SSML in the text policy: hostile documents refused at once, each tag mapped onto the
engine (breaks as silence, rate as speed, volume as gain, say-as/sub/phoneme as words),
and heard as intended by the offline recognizer."""

from __future__ import annotations

import numpy as np
import pytest
from magpie_tts.engine import TextError, TextPolicy
from magpie_tts.engine.text import sayas
from magpie_tts.engine.text.segment import prosody_of
from magpie_tts.engine.text.ssml import MAX_DEPTH, SsmlError, is_ssml

from ..conftest import write_wav

POLICY = TextPolicy()

BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">'
        for i in range(1, 10)
    )
    + "]><speak>&lol9;</speak>"
)
HOSTILE = [
    (BOMB, "DTD"),
    ('<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>', "DTD"),
    ("<speak>" + "<s>" * 40 + "deep" + "</s>" * 40 + "</speak>", "nested deeper"),
    ("<speak>Hello <break time='1s'></speak>", "not well-formed"),
    ("<speak>caf&eacute;</speak>", "not well-formed"),  # an HTML entity is undefined in XML
    ("<speak>Hello", "not well-formed"),
    ('<speak><break time="soon"/>Hi</speak>', "break"),
    ('<speak><prosody rate="fastest">Hi</prosody></speak>', "rate"),
    ('<speak><prosody volume="11">Hi</prosody></speak>', "volume"),
    ("<speak><sub>WWW</sub></speak>", "alias"),
    ('<speak><break time="1s"/></speak>', "nothing speakable"),
]


@pytest.mark.parametrize(("document", "words"), HOSTILE, ids=[w for _, w in HOSTILE])
def test_hostile_and_malformed_documents_are_refused_with_a_reason(document, words) -> None:
    with pytest.raises(TextError, match=words) as caught:
        POLICY.units(document)
    assert "lol" not in str(caught.value) and "passwd" not in str(caught.value)
    if words != "nothing speakable":
        assert isinstance(caught.value, SsmlError) and str(caught.value).startswith("SSML")


def test_only_text_that_starts_with_speak_is_ssml() -> None:
    assert is_ssml("  <speak>Hi</speak>") and not is_ssml("Say <speak> please")
    with pytest.raises(TextError, match="markup"):
        POLICY.units("Say <b>this</b>.")
    assert POLICY.units(f"<speak>{'<s>x</s>' * 0}Depth {MAX_DEPTH} is fine.</speak>")


def test_breaks_prosody_and_marks_map_onto_units() -> None:
    units = POLICY.units(
        '<speak><mark name="start"/>Turn on the lights. <break time="900ms"/>'
        '<prosody rate="50%" volume="-6dB" pitch="+2st">Slowly <mark name="mid"/>now'
        '</prosody><break strength="strong"/><mark name="end"/></speak>'
    )
    assert [str(u) for u in units] == ["Turn on the lights.", "Slowly now"]
    first, second = (prosody_of(u) for u in units)
    assert first.pause_s == 0 and first.marks == ((0, "start"),) and first.rate == 1.0
    assert second.pause_s == pytest.approx(0.9) and second.rate == 0.5
    assert second.gain == pytest.approx(10 ** (-6 / 20))
    assert second.marks == ((1, "mid"), (2, "end")) and second.tail_s == pytest.approx(0.75)
    assert units.notes == ("prosody pitch ignored: the voice cannot change its pitch",)


def test_unknown_tags_are_spoken_and_reported_without_their_text() -> None:
    units = POLICY.units("<speak><voice name='x'>Hello</voice> <lang>there</lang>.</speak>")
    assert " ".join(units) == "Hello there."
    assert units.notes == (
        "unknown tag <voice>: its text is spoken",
        "unknown tag <lang>: its text is spoken",
    )
    assert all("Hello" not in n for n in units.notes)


def test_say_as_sub_and_phoneme_become_words_the_engine_reads() -> None:
    text = " ".join(
        POLICY.units(
            '<speak><say-as interpret-as="characters">IBM</say-as> '
            '<sub alias="World Wide Web">WWW</sub> '
            '<phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme> '
            '<say-as interpret-as="ordinal">3</say-as> '
            '<say-as interpret-as="cardinal">1,204</say-as> '
            '<say-as interpret-as="digits">2048</say-as></speak>'
        )
    )
    assert text == (
        "eye bee em World Wide Web [[ təˈmɑːtoʊ ]] third one thousand two hundred four "
        "two zero four eight"
    )


@pytest.mark.parametrize(
    ("written", "fmt", "spoken"),
    [
        ("2024-03-05", None, "March fifth, twenty twenty-four"),
        ("05/03/2024", "dmy", "March fifth, twenty twenty-four"),
        ("3/5", "md", "March fifth"),
        ("Mar 2024", "my", "March, twenty twenty-four"),
        ("12", "d", "the twelfth"),
        ("13/13/2024", "mdy", None),
    ],
)
def test_dates_are_read_in_their_format(written, fmt, spoken) -> None:
    assert sayas.date(written, fmt) == spoken


def test_telephone_time_and_spelling() -> None:
    assert sayas.telephone("+1 (555) 010-2030") == (
        "plus one, five five five, zero one zero, two zero three zero"
    )
    assert sayas.time("1430") == "14:30" and sayas.time("noon") is None
    assert sayas.characters("A1 b") == "eigh one, bee"


def test_first_unit_of_ssml_is_the_first_unit_of_its_plain_text() -> None:
    plain = "Good morning, the weather today is sunny with a light breeze from the west."
    assert POLICY.units(f"<speak><p>{plain}</p></speak>")[0] == POLICY.units(plain)[0]


def _longest_quiet_s(pcm: np.ndarray, rate: int, floor: int = 300, hop: int = 256) -> float:
    frames = np.abs(pcm[: len(pcm) // hop * hop].reshape(-1, hop)).max(axis=1) < floor
    best = run = 0
    for quiet in frames:
        run = run + 1 if quiet else 0
        best = max(best, run)
    return best * hop / rate


def test_break_is_silence_where_it_stands_and_rate_slows_the_unit(synth) -> None:
    rate = synth.voice.sample_rate
    sentence = "Turn on the kitchen lights and the hallway too."
    broken = synth.synthesize(
        "<speak>Turn on the kitchen lights <break time='900ms'/> and the hallway too.</speak>"
    )
    plain = synth.synthesize(sentence)
    # the bound: a 900 ms break is heard as a pause of 0.75..1.2 s
    assert 0.75 <= _longest_quiet_s(broken, rate) <= 1.2
    assert _longest_quiet_s(plain, rate) < 0.5
    slow = synth.synthesize(f"<speak><prosody rate='50%'>{sentence}</prosody></speak>")
    assert 1.6 <= len(slow) / len(plain) <= 2.5
    soft = synth.synthesize(f"<speak><prosody volume='x-soft'>{sentence}</prosody></speak>")
    assert np.abs(soft).max() < 0.5 * np.abs(plain).max()


def test_break_silence_comes_before_the_next_units_frontend(synth) -> None:
    chunks = synth.stream("<speak><break time='2s'/>Hello there.</speak>")
    first = next(chunks)
    assert first.duration_s == pytest.approx(2.0) and not first.pcm.any()
    assert sum(c.duration_s for c in chunks) > 0.3


def test_say_as_sub_and_phoneme_are_heard_as_intended(synth, recognizer, tmp_path) -> None:
    rate = synth.voice.sample_rate
    cases = [
        ("The word is <say-as interpret-as='characters'>dog</say-as>.", "the word is d o g"),
        (
            "I read it on the <sub alias='World Wide Web'>WWW</sub>.",
            "i read it on the world wide web",
        ),
        (
            "I like to eat <phoneme alphabet='ipa' ph='bənˈænəz'>fruit</phoneme> every day.",
            "i like to eat bananas every day",
        ),
    ]
    for body, expected in cases:
        pcm = synth.synthesize(f"<speak>{body}</speak>")
        score, heard = recognizer.wer(write_wav(tmp_path / "ssml.wav", pcm, rate), expected)
        assert score <= 0.25, heard
