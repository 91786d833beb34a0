"""Capacity and shedding in the real daemon: the measured capacity shown in /health,
status and /metrics; with a first-audio budget no utterance can meet (1 ms), a client
and a low-priority speaker request are refused at once with `busy` (HTTP 429 with
Retry-After, an MQTT error with its code), while alert and normal speaker utterances
are never shed and are spoken."""

from __future__ import annotations

import json

import httpx
import pytest

from ..harness import make_http_daemon


@pytest.fixture(scope="module")
def shedding_daemon(tmp_path_factory, broker, prepared_state):
    proc = make_http_daemon(
        tmp_path_factory.mktemp("shedding"),
        broker.port,
        prepared_state,
        engine__workers="auto",  # the default: lanes for a network frontend on 2+ cores
        limits__max_streams="auto",  # the defaults (the harness fixes them for other tests)
        limits__first_audio_budget_ms="1",
    ).start()
    yield proc
    proc.stop()


def test_over_budget_requests_are_refused_at_once_alerts_are_spoken(shedding_daemon, probe) -> None:
    daemon = shedding_daemon
    with httpx.Client(base_url=daemon.url, timeout=30) as client:
        capacity = client.get("/health").json()["capacity"]
        assert capacity["source"] == "measured" and capacity["limit"] >= 1
        assert capacity["first_audio_budget_ms"] == 1
        body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy"}
        refused = client.post("/v1/audio/speech", json=body)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == "busy" and "first audio would come" in error["message"]
        metrics = client.get("/metrics").text
    assert f"magpie_stream_capacity {float(capacity['limit'])}" in metrics

    daemon.say(json.dumps({"text": "A low one.", "id": "shed-low", "priority": "low"}))
    shed = probe.wait(f"{daemon.base}/error", lambda e: e.get("id") == "shed-low")[0]
    assert shed["code"] == "busy" and "budget" in shed["error"]
    for request_id, priority in (("kept-alert", "alert"), ("kept-normal", "normal")):
        daemon.say(json.dumps({"text": "Smoke alarm.", "id": request_id, "priority": priority}))
        probe.wait(
            f"{daemon.base}/events",
            lambda e, i=request_id: e["id"] == i and e["event"] == "finished",
            timeout=30,
        )
    assert probe.events(daemon.base, "shed-low") == []  # refused: never queued
    status = probe.wait(f"{daemon.base}/status", lambda s: s.get("capacity"))[-1]
    assert status["capacity"]["lanes"] >= 1
