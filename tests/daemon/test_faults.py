"""Faults a shelf speaker lives through: broker restarts, daemon crashes, engine errors."""

from __future__ import annotations

import json
import signal
import time

import pytest

from ..harness import Broker, Probe, make_daemon, publish

pytestmark = pytest.mark.slow  # starts its own brokers and daemons

LONG = (
    "This is a fairly long announcement, so that playback is still going on while the "
    "broker goes away. It keeps talking for several seconds, about nothing in particular."
)


@pytest.fixture
def persistent_broker(tmp_path):
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker", persistent=True).start()
    yield broker
    broker.stop()


def finished(probe, base: str, request_id: str) -> list:
    return probe.find(
        f"{base}/events", lambda e: e["id"] == request_id and e["event"] == "finished"
    )


def test_broker_restart_loses_nothing_and_speaks_once(
    tmp_path, persistent_broker, prepared_state
) -> None:
    broker = persistent_broker
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state, device="ttspaced").start()
    probe = Probe(broker.port, ["#"])
    try:
        daemon.say(json.dumps({"text": LONG, "id": "before-1"}))
        daemon.say(json.dumps({"text": "Queued before the outage.", "id": "before-2"}))
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "before-1" and e["event"] == "started"
        )
        broker.stop(graceful=True)  # during playback, with a request queued
        time.sleep(1.0)
        broker.start()
        # published while the daemon is still away (it reconnects with backoff)
        for index in range(3):
            publish(
                broker.port,
                f"{daemon.base}/say",
                json.dumps(
                    {"text": f"Published during the outage, number {index}.", "id": f"away-{index}"}
                ),
            )
        for request_id in ("before-1", "before-2", "away-0", "away-1", "away-2"):
            probe.wait(
                f"{daemon.base}/events",
                lambda e, r=request_id: e["id"] == r and e["event"] == "finished",
                timeout=90,
            )
        time.sleep(2.0)  # room for a duplicate to show up
        for request_id in ("before-1", "before-2", "away-0", "away-1", "away-2"):
            assert len(finished(probe, daemon.base, request_id)) == 1, request_id
        status = probe.wait(f"{daemon.base}/status", lambda s: s.get("mqtt_reconnects", 0) >= 1)
        assert status[-1]["state"] == "online"
    finally:
        probe.close()
        daemon.stop()


def test_last_will_marks_offline_and_restart_back_online(tmp_path, broker, prepared_state):
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state).start()
    probe = Probe(broker.port, [f"{daemon.base}/status"])
    try:
        daemon.proc.send_signal(signal.SIGKILL)  # no goodbye: the broker sends the will
        daemon.proc.wait(10)
        probe.wait(f"{daemon.base}/status", lambda s: s.get("state") == "offline", timeout=60)
        daemon.start()
        probe.wait(
            f"{daemon.base}/status",
            lambda s: s.get("state") == "online" and s.get("pid") == daemon.proc.pid,
        )
    finally:
        probe.close()
        daemon.stop()


def test_broker_down_at_start_is_not_fatal(tmp_path, prepared_state) -> None:
    broker = Broker(tmp_path)
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state)
    daemon.start(wait_online=False)
    try:
        time.sleep(3.0)
        assert daemon.alive()
        broker.start()
        probe = Probe(broker.port, [f"{daemon.base}/#"])
        try:
            probe.wait(f"{daemon.base}/status", lambda s: s.get("state") == "online", timeout=60)
            daemon.say(json.dumps({"text": "Late broker.", "id": "late-1"}))
            probe.wait(
                f"{daemon.base}/events", lambda e: e["id"] == "late-1" and e["event"] == "finished"
            )
        finally:
            probe.close()
    finally:
        daemon.stop()
        broker.stop()


@pytest.mark.parametrize("problem", ["missing", "corrupt"])
def test_bad_model_fails_start_with_a_clear_message(
    tmp_path, broker, prepared_state, voice, problem: str
) -> None:
    model = tmp_path / "broken.onnx"
    if problem == "corrupt":
        model.write_bytes(b"\x08\x07garbage" * 1000)
        (tmp_path / "broken.onnx.json").write_text(voice.config_path.read_text())
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state, engine__voice=str(model))
    daemon.start(wait_online=False)
    assert daemon.proc.wait(60) == 1
    log = daemon.log()
    assert "cannot start" in log and "broken.onnx" in log
    assert "Traceback" not in log


def test_an_exception_inside_synthesis_fails_only_that_utterance(
    tmp_path, broker, prepared_state
) -> None:
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state)
    daemon.env["MAGPIE_TTS_TEST_HOOKS"] = "1"
    daemon.start()
    probe = Probe(broker.port, [f"{daemon.base}/#"])
    try:
        daemon.say(json.dumps({"text": "This one breaks __magpie_fail__ inside.", "id": "boom"}))
        daemon.say(json.dumps({"text": "This one is fine.", "id": "fine"}))
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "fine" and e["event"] == "finished"
        )
        assert probe.events(daemon.base, "boom")[-1] == "error"
        errors = probe.find(f"{daemon.base}/error", lambda e: e["id"] == "boom")
        assert len(errors) == 1 and "internal error" in errors[0]["error"]
        assert daemon.alive()
    finally:
        probe.close()
        daemon.stop()


def test_retained_commands_are_ignored_at_start_and_after_a_broker_restart(
    tmp_path, persistent_broker, prepared_state
) -> None:
    """A retained say (stream, stop, Hermes say) left on the broker is delivered again at
    every subscribe: at start, at each restart and broker reconnect. It is no command:
    nothing is queued or heard, each delivery gets one error, and live commands after it
    are spoken."""
    broker = persistent_broker  # keeps the retained messages across its restart
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state)
    base = daemon.base
    stale = {
        f"{base}/say": {"id": "stale-say", "text": "Kitchen timer done."},
        f"{base}/say/stream": {"id": "stale-stream", "text": "Timer done.", "final": True},
        f"{base}/stop": {"id": "stale-stop"},
        "hermes/tts/say": {"id": "stale-hermes", "text": "Timer done.", "siteId": "default"},
    }
    for topic, message in stale.items():
        publish(broker.port, topic, json.dumps(message), "-r")  # before the daemon starts
    probe = Probe(broker.port, [f"{base}/#"])

    def retained_errors(count: int) -> list:
        return probe.wait(f"{base}/error", lambda e: "retained" in e["error"], count=count)

    def spoken(request_id: str) -> None:
        daemon.say(json.dumps({"id": request_id, "text": "Fresh news."}))
        probe.wait(f"{base}/events", lambda e: e["id"] == request_id and e["event"] == "finished")

    try:
        daemon.start()
        assert {e["topic"] for e in retained_errors(4)} == set(stale)
        time.sleep(1.0)  # room for a retained say to be (wrongly) spoken
        assert not daemon.recorded().any()  # the ALSA tap heard nothing
        spoken("fresh-1")
        assert daemon.recorded().any()
        broker.stop(graceful=True)
        time.sleep(1.0)
        broker.start()  # the daemon reconnects and subscribes again: delivered again
        probe.wait(f"{base}/status", lambda s: s.get("mqtt_reconnects", 0) >= 1, timeout=60)
        assert len(retained_errors(8)) == 8  # once per delivery
        spoken("fresh-2")
        for message in stale.values():
            assert probe.events(base, message["id"]) == [], message
    finally:
        probe.close()
        daemon.stop()
