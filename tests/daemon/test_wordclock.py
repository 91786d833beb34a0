"""The speaker's word clock: each word and mark reported once it sounds (its first
frame written to the device), in order, and nothing after a stop."""

from __future__ import annotations

import time
from typing import Any

from magpie_tts.daemon.core.utterance import Ask, Utterance
from magpie_tts.daemon.core.wordclock import WordClock
from magpie_tts.daemon.frontends.mqtt.payloads import parse_say
from magpie_tts.daemon.player import Playback
from magpie_tts.engine import WordTime


class Reports:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def report(self, _utterance: Utterance, name: str, **fields: Any) -> None:
        self.seen.append((name, fields))


def _until(reports: Reports, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(reports.seen) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_words_and_marks_are_reported_once_they_sound() -> None:
    reports, playback = Reports(), Playback(sample_rate=22050)
    clock = WordClock(reports, Utterance(Ask(id="w")), playback)  # type: ignore[arg-type]
    clock.add([WordTime("go", 0.0, 0.0, "mark"), WordTime("Hello", 0.0, 0.3)])
    clock.add([WordTime("there", 0.3, 0.6)])
    clock.close()
    time.sleep(0.1)
    assert reports.seen == []  # nothing sounds before its frames are written
    playback.frames_written = 22050  # one second of audio went to the device
    _until(reports, 3)
    assert reports.seen == [
        ("mark", {"mark": "go", "time": 0.0}),
        ("word", {"word": "Hello", "start": 0.0, "end": 0.3}),
        ("word", {"word": "there", "start": 0.3, "end": 0.6}),
    ]


def test_a_stop_ends_the_clock_without_more_reports() -> None:
    reports, playback = Reports(), Playback(sample_rate=22050)
    utterance = Utterance(Ask(id="s"))
    clock = WordClock(reports, utterance, playback)  # type: ignore[arg-type]
    clock.add([WordTime("now", 0.0, 0.1), WordTime("later", 30.0, 30.5)])
    clock.close()
    playback.frames_written = 256  # one period
    _until(reports, 1)
    utterance.stop.stop()
    clock._thread.join(5)
    assert not clock._thread.is_alive() and [f["word"] for _, f in reports.seen] == ["now"]


def test_mqtt_json_asks_for_marks_and_a_dictionary() -> None:
    ask = parse_say(b'{"text": "Hi", "marks": true, "custom_dictionary": "hi  haI"}', 1000)
    assert ask.marks and ask.custom_dictionary == "hi  haI"
    assert not parse_say(b"Hi", 1000).marks
