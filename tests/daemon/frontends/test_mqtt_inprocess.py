"""The MQTT frontend in-process, its link replaced by a recorder, on a Core with fakes:
payloads in, events, errors and status out, in milliseconds. The end-to-end tests
(test_daemon_mqtt.py, test_bad_input.py) publish with mosquitto_pub to a real broker."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.utterance import Ask
from magpie_tts.daemon.frontends.mqtt.frontend import MqttFrontend

from ...fakes import FakeHost, FakeSynth, RecordingSink, fake_core

BASE = "magpie"


class RecordingLink:
    """What the frontend publishes, instead of a broker connection."""

    connects = 1

    def __init__(self) -> None:
        self.published: list[tuple[str, Any, bool]] = []
        self._cond = threading.Condition()

    def publish(self, topic: str, payload: Any, retain: bool = False) -> None:
        with self._cond:
            self.published.append((topic, payload, retain))
            self._cond.notify_all()

    def on(self, topic: str) -> list[Any]:
        with self._cond:
            return [payload for t, payload, _ in self.published if t == topic]

    def wait(self, topic: str, predicate: Any, timeout: float = 5.0) -> Any:
        with self._cond:
            found: list[Any] = []

            def seen() -> bool:
                found[:] = [p for t, p, _ in self.published if t == topic and predicate(p)]
                return bool(found)

            if not self._cond.wait_for(seen, timeout):
                raise TimeoutError(f"nothing on {topic}: {self.published[-5:]}")
            return found[0]


@pytest.fixture
def mqtt():
    cores: list[Any] = []

    def build(**core: Any) -> tuple[MqttFrontend, RecordingLink]:
        made = fake_core(**core)
        cores.append(made)
        config = Config.model_validate({"mqtt": {"base_topic": BASE, "hermes": True}})
        frontend = MqttFrontend(config, FakeHost(made))
        frontend.link = link = RecordingLink()  # type: ignore[assignment]
        made.monitor = frontend_monitor(frontend)
        return frontend, link

    yield build
    for core in cores:
        core.shutdown()


def frontend_monitor(frontend: MqttFrontend) -> Any:
    """The service's part: every utterance's events reach the frontend's observe."""

    class Monitor:
        def report(self, utterance: Any, event: Any) -> None:
            frontend.observe(utterance, event)

    return Monitor()


def receive(
    frontend: MqttFrontend, topic: str, payload: bytes | str, dup: bool = False, **flags: bool
) -> None:
    data = payload.encode() if isinstance(payload, str) else payload
    frontend._on_message(topic, data, time.monotonic(), dup, **flags)


def events_of(link: RecordingLink, request_id: str) -> list[str]:
    return [e["event"] for e in link.on(f"{BASE}/events") if e["id"] == request_id]


def test_say_reports_each_event_and_the_status_follows(mqtt) -> None:
    frontend, link = mqtt()
    receive(frontend, f"{BASE}/say", json.dumps({"id": "a", "text": "Hello there."}))
    link.wait(f"{BASE}/events", lambda e: e["id"] == "a" and e["event"] == "finished")
    assert events_of(link, "a") == ["queued", "started", "finished"]
    assert link.on(f"{BASE}/status"), "the retained status follows a terminal event"


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b'{"text": ', "JSON"),
        (b"\xff\xfe", "UTF-8"),
        (b'{"text": 5}', "text"),
        (b'{"text": "Hi.", "priority": "urgent"}', "priority"),
        (b"", "empty"),
    ],
)
def test_bad_payloads_get_one_clear_error(mqtt, payload: bytes, words: str) -> None:
    frontend, link = mqtt()
    receive(frontend, f"{BASE}/say", payload)
    (error,) = link.on(f"{BASE}/error")
    assert error["topic"] == f"{BASE}/say" and words.lower() in error["error"].lower()
    receive(frontend, f"{BASE}/say", "Still serving.")
    link.wait(f"{BASE}/events", lambda e: e["event"] == "finished")


def test_stop_of_an_unknown_id_is_an_error(mqtt) -> None:
    frontend, link = mqtt()
    receive(frontend, f"{BASE}/stop", json.dumps({"id": "nobody"}))
    (error,) = link.on(f"{BASE}/error")
    assert "nobody" in error["error"]


def test_hermes_for_this_site_is_spoken_and_another_site_is_ignored(mqtt) -> None:
    frontend, link = mqtt()
    other = {"text": "Not ours.", "siteId": "kitchen", "id": "h0"}
    receive(frontend, "hermes/tts/say", json.dumps(other))
    mine = {"text": "Ours.", "siteId": "default", "id": "h1", "sessionId": "s"}
    receive(frontend, "hermes/tts/say", json.dumps(mine))
    done = link.wait("hermes/tts/sayFinished", lambda p: p["id"] == "h1")
    assert done["sessionId"] == "s"
    assert not events_of(link, "h0") and not link.on(f"{BASE}/error")


def test_a_redelivered_duplicate_is_spoken_once(mqtt) -> None:
    synth = FakeSynth()
    frontend, link = mqtt(synth=synth)
    message = json.dumps({"id": "d", "text": "Once."})
    receive(frontend, f"{BASE}/say", message)
    receive(frontend, f"{BASE}/say", message, dup=True)
    link.wait(f"{BASE}/events", lambda e: e["id"] == "d" and e["event"] == "finished")
    assert synth.spoken == ["Once."] and events_of(link, "d").count("queued") == 1


def test_speech_asked_elsewhere_is_reported_on_the_events_topic(mqtt) -> None:
    frontend, link = mqtt()
    sink = RecordingSink()
    frontend.core.submit(Ask(id="http-say-1", text="From HTTP.", source="http-say"), sink)
    sink.wait("http-say-1", "finished")
    link.wait(f"{BASE}/events", lambda e: e["id"] == "http-say-1" and e["event"] == "finished")


def test_an_audio_problem_is_published_with_the_status(mqtt) -> None:
    frontend, link = mqtt()
    frontend.audio_changed("cannot open ALSA device 'hw:9'")
    (error,) = link.on(f"{BASE}/error")
    assert error["topic"] == "audio" and "hw:9" in error["error"]
    assert link.on(f"{BASE}/status")


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        (f"{BASE}/say", '{"id": "r1", "text": "Kitchen timer done."}'),
        (f"{BASE}/say/stream", '{"id": "r1", "text": "Kitchen timer done.", "final": true}'),
        (f"{BASE}/stop", "{}"),
        ("hermes/tts/say", '{"id": "r1", "text": "Kitchen timer.", "siteId": "default"}'),
    ],
)
def test_a_retained_command_is_ignored_with_one_error(mqtt, caplog, topic, payload) -> None:
    """A copy from the broker's retained store (each (re)subscribe) is no command: never
    spoken, never stopping speech; one error per delivery says so, the log names no text."""
    caplog.set_level(logging.INFO)
    synth = FakeSynth(unit_delay=0.2)
    frontend, link = mqtt(synth=synth)
    receive(frontend, f"{BASE}/say", json.dumps({"id": "live", "text": "Live one."}))
    link.wait(f"{BASE}/events", lambda e: e["id"] == "live" and e["event"] == "started")
    receive(frontend, topic, payload, retained=True)
    (error,) = link.on(f"{BASE}/error")
    assert error["topic"] == topic and "retained" in error["error"]
    assert [e["event"] for e in link.on(f"{BASE}/events") if e["id"] == "r1"] == []
    link.wait(f"{BASE}/events", lambda e: e["id"] == "live" and e["event"] == "finished")
    assert synth.spoken == ["Live one."]  # the retained stop stopped nothing either
    if topic.startswith("hermes/"):
        assert "retained" in link.on("hermes/error/tts")[0]["error"]
    assert "retained" in caplog.text and "Kitchen" not in caplog.text


def test_refused_text_stays_out_of_the_log(mqtt, caplog) -> None:
    caplog.set_level(logging.INFO)
    frontend, link = mqtt()
    secret = '<note pin="4821-secret">Door code</note>'
    receive(frontend, f"{BASE}/say", json.dumps({"id": "m1", "text": secret}))
    receive(frontend, f"{BASE}/say/stream", json.dumps({"id": "m2", "text": secret}))
    errors = link.on(f"{BASE}/error")
    assert [e["id"] for e in errors] == ["m1", "m2"]
    assert all("markup" in e["error"] and "4821" not in e["error"] for e in errors)
    assert "bad-text" in caplog.text and "4821" not in caplog.text
    assert "markup" not in caplog.text  # the kind of refusal, not the reason


@pytest.mark.parametrize("length", [20, 5000])
def test_a_client_id_can_neither_forge_nor_flood_a_log_line(mqtt, caplog, length: int) -> None:
    frontend, _link = mqtt()
    forged = "x\n2026-01-01 00:00:00,000 CRITICAL forged" + "y" * length
    with caplog.at_level(logging.INFO):
        receive(frontend, f"{BASE}/say", json.dumps({"id": forged, "text": "<b>Hi</b>"}))
    lines = [record.getMessage() for record in caplog.records]
    assert lines, "the refusal is logged"
    assert all("\n" not in line and len(line) < 300 for line in lines), lines
