"""The bad-input corpus over real MQTT: one clear error each, and the daemon keeps serving."""

from __future__ import annotations

import json

import pytest

from ...harness import Probe, make_daemon

SAY = [
    b"",
    b"   \n\t  ",
    b"x" * 1_000_000,
    b"\xff\xfe\xfd invalid utf-8",
    b'{"text": "unclosed',
    b'{"text": ["not", "a", "string"]}',
    b'{"speed": 1.0}',
    b'{"text": "Hi", "speed": -2}',
    b'{"text": "Hi", "speed": 1e9}',
    b'{"text": "Hi", "volume": 500}',
    b'{"text": "Hi", "voice": "no-such-voice"}',
    b"Hello\x00world\x1b[31m",
    b"<speak><prosody rate='fast'>Hi</speak>",  # SSML, not well-formed
    "😀🎉🔥".encode(),
    b'{"text": "Hi", "priority": 3}',
    b'{"text": "Hi", "id": [1]}',
]
STREAM = [
    b'{"text": "no id here", "final": false}',
    b'{"id": "ghost", "final": true}',
    b"{not json",
    b'{"id": "s-types", "text": 5}',
    b'{"id": "s-flag", "final": "yes"}',
]
HERMES = [
    b"{not json at all",
    b'{"text": "", "siteId": "default", "sessionId": "h1"}',
    b'{"text": "Hi", "siteId": "default", "volume": 99, "sessionId": "h2"}',
    b'{"text": "<b>bold</b>", "siteId": "default", "sessionId": "h3"}',
    '{"text": "🙂🙃", "siteId": "default", "sessionId": "h4"}'.encode(),
]


@pytest.fixture(scope="module")
def corpus_daemon(tmp_path_factory, broker, prepared_state):
    daemon = make_daemon(
        tmp_path_factory.mktemp("corpus"),
        broker.port,
        prepared_state,
        limits__stream_idle_s="2",
        limits__rate_per_minute="1000",
    )
    daemon.start()
    yield daemon
    daemon.stop()


def test_corpus_each_gets_one_error_then_valid_speech(corpus_daemon, broker) -> None:
    daemon = corpus_daemon
    probe = Probe(broker.port, [f"{daemon.base}/#", "hermes/#"])
    try:
        for payload in SAY:
            daemon.say(payload)
        for payload in STREAM:
            daemon.say(payload, "say/stream")
        for payload in HERMES:
            daemon.say(payload, "hermes/tts/say")
        # a stream that never sends final: spoken after the idle limit, and reported
        daemon.say(json.dumps({"id": "forever", "text": "This stream never ends, "}), "say/stream")
        total = len(SAY) + len(STREAM) + len(HERMES) + 1
        errors = probe.wait(f"{daemon.base}/error", count=total, timeout=60)
        hermes_errors = probe.wait("hermes/error/tts", count=len(HERMES))
        daemon.say(json.dumps({"text": "Still serving after all that.", "id": "survivor"}))
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "survivor" and e["event"] == "finished"
        )
        assert len(probe.find(f"{daemon.base}/error")) == total  # exactly one each
        assert len(probe.find("hermes/error/tts")) == len(HERMES)
        assert all(isinstance(e["error"], str) and len(e["error"]) > 5 for e in errors)
        assert {e["sessionId"] for e in hermes_errors} >= {"h1", "h2", "h3", "h4"}
        forever = [e for e in errors if e["id"] == "forever"]
        assert len(forever) == 1 and "without final" in forever[0]["error"]
        assert "finished" in probe.events(daemon.base, "forever")  # what came was spoken
        assert daemon.alive()
    finally:
        probe.close()


def test_rate_limit_answers_with_an_error(tmp_path, broker, prepared_state) -> None:
    daemon = make_daemon(
        tmp_path / "d", broker.port, prepared_state, limits__rate_per_minute="3"
    ).start()
    probe = Probe(broker.port, [f"{daemon.base}/#"])
    try:
        for index in range(5):
            daemon.say(json.dumps({"text": "Rate.", "id": f"r{index}"}))
        errors = probe.wait(f"{daemon.base}/error", count=2)
        assert [e["id"] for e in errors] == ["r3", "r4"]
        assert all("rate limit" in e["error"] for e in errors)
        probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "r2" and e["event"] == "finished")
    finally:
        probe.close()
        daemon.stop()


def test_full_queue_answers_with_an_error(tmp_path, broker, prepared_state) -> None:
    daemon = make_daemon(
        tmp_path / "d", broker.port, prepared_state, device="ttspaced", limits__max_queue="2"
    ).start()
    probe = Probe(broker.port, [f"{daemon.base}/#"])
    try:
        daemon.say(
            json.dumps({"text": "A longer sentence that keeps the speaker busy.", "id": "q-busy"})
        )
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "q-busy" and e["event"] == "started"
        )
        for index in range(4):
            daemon.say(json.dumps({"text": f"Queued {index}.", "id": f"q{index}"}))
        errors = probe.wait(f"{daemon.base}/error", count=2)
        assert [e["id"] for e in errors] == ["q2", "q3"]
        assert all("queue full" in e["error"] for e in errors)
        probe.wait(
            f"{daemon.base}/events",
            lambda e: e["id"] == "q1" and e["event"] == "finished",
            timeout=60,
        )
    finally:
        probe.close()
        daemon.stop()
