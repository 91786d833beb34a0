"""Home Assistant MQTT discovery on the real broker: the retained device config names the
topics the daemon serves, its templates render against the real status, its notify
entity speaks and its button stops."""

from __future__ import annotations

import time

import jinja2
import pytest
from magpie_tts.daemon.frontends.mqtt.ha_discovery import config_topic

from ...conftest import write_wav
from ...harness import Probe, publish

TEMPLATES = jinja2.Environment()


def render(template: str, status: dict) -> str:
    return TEMPLATES.from_string(template).render(value_json=status).strip()


@pytest.fixture
def discovery(daemon, broker):
    topic = config_topic("homeassistant", daemon.base)
    probe = Probe(broker.port, [topic, f"{daemon.base}/#"])
    try:
        yield probe, topic, probe.wait(topic)[-1]  # retained: there at once
    finally:
        probe.close()


def test_retained_config_names_the_served_topics(daemon, discovery) -> None:
    _probe, _topic, config = discovery
    base = daemon.base
    assert config["dev"]["name"] == "Magpie TTS" and config["dev"]["ids"]
    assert config["availability_topic"] == f"{base}/status"
    parts = config["cmps"]
    assert {c["p"] for c in parts.values()} == {"notify", "button", "sensor", "binary_sensor"}
    assert parts["say"]["command_topic"] == f"{base}/say"
    assert parts["stop"]["command_topic"] == f"{base}/stop"
    for name in ("speaking", "ttfa", "queue", "xruns"):
        assert parts[name]["state_topic"] == f"{base}/status"
    assert parts["ttfa"]["unit_of_measurement"] == "ms"
    assert parts["ttfa"]["state_class"] == "measurement"
    assert len({c["unique_id"] for c in parts.values()}) == len(parts)


def test_templates_render_against_the_real_status(daemon, discovery, probe) -> None:
    watcher, _topic, config = discovery
    parts = config["cmps"]
    daemon.say("Checking the sensors.")
    status = watcher.wait(f"{daemon.base}/status", lambda s: "ttfa_ms" in s)[-1]
    assert render(config["availability_template"], status) == config["payload_available"]
    assert render(parts["speaking"]["value_template"], status) in ("ON", "OFF")
    assert float(render(parts["ttfa"]["value_template"], status)) > 0
    assert render(parts["queue"]["value_template"], status) == str(status["queue_depth"])
    assert int(render(parts["xruns"]["value_template"], status)) >= 0
    offline = {"state": "offline"}
    assert render(config["availability_template"], offline) == config["payload_not_available"]


def test_notify_command_topic_speaks(daemon, discovery, recognizer, tmp_path) -> None:
    watcher, _topic, config = discovery
    text = "The laundry is done. Please empty the washing machine before dinner."
    before = len(daemon.recorded())
    daemon.say(text, topic=config["cmps"]["say"]["command_topic"].split("/", 1)[1])
    watcher.wait(f"{daemon.base}/events", lambda e: e["event"] == "finished")
    time.sleep(0.2)
    wav = write_wav(tmp_path / "notify.wav", daemon.recorded()[before:], 22050)
    rate, heard = recognizer.wer(wav, text)
    assert rate <= 0.1, heard


def test_republished_when_home_assistant_comes_online(daemon, discovery, broker) -> None:
    watcher, topic, _config = discovery
    seen = len(watcher.find(topic))

    publish(broker.port, "homeassistant/status", "online")
    watcher.wait(topic, count=seen + 1, timeout=10)
    publish(broker.port, "homeassistant/status", "offline")  # nothing to do then
    assert daemon.alive()


def test_stop_button_stops_speech(paced_daemon, broker) -> None:
    topic = config_topic("homeassistant", paced_daemon.base)
    probe = Probe(broker.port, [topic, f"{paced_daemon.base}/events"])
    try:
        config = probe.wait(topic)[-1]
        button = config["cmps"]["stop"]
        paced_daemon.say(
            '{"id": "long-ha", "text": "This is a long announcement about the weather. '
            'It goes on for a while, so that the button can stop it half way through."}'
        )
        probe.wait(f"{paced_daemon.base}/events", lambda e: e["event"] == "started")

        publish(broker.port, button["command_topic"], button["payload_press"])
        stopped = probe.wait(
            f"{paced_daemon.base}/events",
            lambda e: e["id"] == "long-ha" and e["event"] in ("stopped", "finished"),
        )
        assert stopped[-1]["event"] == "stopped"
    finally:
        probe.close()
