"""The payload parser: fixed cases and property-based fuzzing (no broker needed)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from magpie_tts.daemon.core.utterance import PRIORITIES, Ask
from magpie_tts.daemon.frontends.mqtt import payloads as rq
from magpie_tts.engine import TextError
from magpie_tts.engine.text.policy import TextPolicy

LIMIT = 10_000


def test_plain_text_and_json() -> None:
    assert rq.parse_say(b"Hello there", LIMIT).text == "Hello there"
    request = rq.parse_say(
        json.dumps(
            {
                "text": "Hi",
                "id": 7,
                "speed": 1.5,
                "volume": 0.5,
                "priority": "alert",
                "voice": "amy",
            }
        ).encode(),
        LIMIT,
    )
    assert (request.id, request.speed, request.volume, request.priority, request.voice) == (
        "7",
        1.5,
        0.5,
        "alert",
        "amy",
    )


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"\xc3\x28", "UTF-8"),
        (b"{oops", "invalid JSON"),
        (b'{"text": 1}', "string"),
        (b'{"text": "a", "speed": "fast"}', "number"),
        (b'{"text": "a", "speed": true}', "number"),
        (b'{"text": "a", "speed": 0}', "speed"),
        (b'{"text": "a", "volume": -1}', "volume"),
        (b'{"text": "a", "id": {}}', "id"),
        (b'{"text": "a", "priority": "now"}', "priority"),
        (b'{"text": "a", "speed": NaN}', "finite"),
        (b"x" * (LIMIT + 1), "too large"),
        (b"{" + b'"a":[' * 1000, "invalid JSON"),
        (b'{"a":' * 1500 + b"1" + b"}" * 1500, "nested too deeply"),
    ],
)
def test_rejections_say_why(payload: bytes, words: str) -> None:
    with pytest.raises(rq.PayloadError, match=words):
        rq.parse_say(payload, LIMIT)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hi\x07there", "control"),
        ("<b>Hello</b>", "markup"),
        ("<speak>Hello</spek>", "SSML is not well-formed"),
        ('<break time="1s"/>', "markup"),
        ("x" * 101, "too long"),
        ("   ", "empty"),
        ("😀🎉", "nothing speakable"),
    ],
)
def test_text_policy_refuses_what_must_not_be_read(text: str, words: str) -> None:
    with pytest.raises(TextError, match=words):
        TextPolicy(max_chars=100).units(text)


def test_errors_carry_only_the_senders_id() -> None:
    with pytest.raises(rq.PayloadError) as caught:
        rq.parse_say(b'{"text": 5, "id": "mine"}', LIMIT)
    assert caught.value.request_id == "mine"
    with pytest.raises(rq.PayloadError) as caught:
        rq.parse_say(b'{"text": 5}', LIMIT)
    assert caught.value.request_id is None


def test_stream_and_stop_and_hermes() -> None:
    piece = rq.parse_stream(b'{"id": "s", "text": "Hel", "final": false}', LIMIT)
    assert (piece.id, piece.text, piece.final) == ("s", "Hel", False)
    with pytest.raises(rq.PayloadError, match="final"):
        rq.parse_stream(b'{"id": "s", "final": "yes"}', LIMIT)
    assert rq.parse_stop(b"", LIMIT) is None
    assert rq.parse_stop(b'{"id": "x"}', LIMIT) == "x"
    assert rq.parse_stop(b"abc", LIMIT) == "abc"
    hermes = rq.parse_hermes(
        b'{"text": "Hi", "siteId": "kitchen", "sessionId": "s1", "id": "h", "lang": "en"}', LIMIT
    )
    assert (hermes.site_id, hermes.session_id, hermes.id) == ("kitchen", "s1", "h")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
payloads = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(
            ["text", "id", "speed", "volume", "priority", "voice", "final", "siteId", "sessionId"]
        ),
        json_values,
        max_size=6,
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=600, deadline=None)
@given(
    payload=payloads,
    parser=st.sampled_from([rq.parse_say, rq.parse_stream, rq.parse_stop, rq.parse_hermes]),
)
def test_parsers_accept_or_reject_clearly_never_crash(payload: bytes, parser) -> None:
    try:
        result = parser(payload, 200)
    except rq.PayloadError as exc:
        assert str(exc)  # a reason the sender can read
        return
    assert isinstance(rq.hermes_context(payload), dict)
    if isinstance(result, rq.StreamPiece):
        result = result.ask
    if isinstance(result, Ask):
        assert isinstance(result.text, str) and result.id
        assert 0.25 <= result.speed <= 4.0 and 0.0 <= result.volume <= 2.0
        assert result.priority in PRIORITIES


def test_speaker_field() -> None:
    assert rq.parse_say(b'{"text": "Hi", "speaker": 3}', LIMIT).speaker == 3
    assert rq.parse_say(b'{"text": "Hi", "speaker": "amy"}', LIMIT).speaker == "amy"
    with pytest.raises(rq.PayloadError, match="speaker"):
        rq.parse_say(b'{"text": "Hi", "speaker": [1]}', LIMIT)
