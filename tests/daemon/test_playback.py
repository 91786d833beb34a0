"""Playback through a real-time paced ALSA PCM: barge-in, priorities, pre-emption."""

from __future__ import annotations

import json
import time

LONG = (
    "Here is the long weather report for the whole week. Monday will be sunny and warm, "
    "with a light breeze from the west. Tuesday brings clouds in the morning and rain in "
    "the afternoon. Wednesday stays cool and grey, and Thursday should clear up nicely."
)
PERIOD = 256


def test_stop_cuts_playback_within_two_periods(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"text": LONG, "id": "long-1"}))
    probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "long-1" and e["event"] == "started")
    time.sleep(1.0)
    daemon.say("", topic="stop")
    stopped = probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "long-1" and e["event"] == "stopped",
        timeout=10,
    )[0]
    assert stopped["frames_after_stop"] <= 2 * PERIOD
    assert stopped["duration_s"] < 6.0  # the report is ~15 s long
    assert probe.events(daemon.base, "long-1") == ["queued", "started", "stopped"]
    # and the daemon goes on speaking afterwards
    daemon.say(json.dumps({"text": "Okay.", "id": "after-stop"}))
    probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "after-stop" and e["event"] == "finished",
        timeout=20,
    )


def test_stop_with_id_stops_only_that_utterance(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"text": "First one is short.", "id": "keep-1"}))
    daemon.say(json.dumps({"text": "Second one goes away.", "id": "drop-1"}))
    daemon.say(json.dumps({"id": "drop-1"}), topic="stop")
    probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "keep-1" and e["event"] == "finished",
        timeout=20,
    )
    assert probe.events(daemon.base, "drop-1")[-1] == "stopped"
    assert "started" not in probe.events(daemon.base, "drop-1")


def test_priority_order_is_honoured(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"text": "Busy speaking this first sentence now.", "id": "p-busy"}))
    probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "p-busy" and e["event"] == "started")
    daemon.say(json.dumps({"text": "Low one.", "id": "p-low", "priority": "low"}))
    daemon.say(json.dumps({"text": "Normal one.", "id": "p-normal"}))
    daemon.say(json.dumps({"text": "Another low.", "id": "p-low2", "priority": "low"}))
    probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "p-low2" and e["event"] == "finished",
        timeout=40,
    )
    order = [
        e["id"]
        for e in probe.find(f"{daemon.base}/events", lambda e: e["event"] == "started")
        if e["id"].startswith("p-")
    ]
    assert order == ["p-busy", "p-normal", "p-low", "p-low2"]


def test_alert_preempts_and_the_interrupted_text_resumes_after_it(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"text": LONG, "id": "a-long", "volume": 0.8}))
    probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "a-long" and e["event"] == "started")
    time.sleep(4.0)  # into the second sentence
    daemon.say(
        json.dumps({"text": "Smoke alarm in the kitchen!", "id": "a-alert", "priority": "alert"})
    )
    probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "a-long" and e["event"] == "finished",
        timeout=60,
    )
    events = [
        (e["id"], e["event"])
        for e in probe.find(f"{daemon.base}/events")
        if e["id"] in ("a-long", "a-alert")
    ]
    assert events.index(("a-long", "interrupted")) < events.index(("a-alert", "started"))
    assert events.index(("a-alert", "finished")) < events.index(("a-long", "finished"))
    assert [e for i, e in events if i == "a-long"].count("finished") == 1  # one terminal
    interrupted = probe.find(
        f"{daemon.base}/events", lambda e: e["id"] == "a-long" and e["event"] == "interrupted"
    )[0]
    assert interrupted["resume_at_unit"] >= 1  # resumes at the unit heard, not the start


def test_a_stop_right_after_an_alert_stops_the_interrupted_speech(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"text": LONG, "id": "b-long"}))
    probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "b-long" and e["event"] == "started")
    time.sleep(0.5)
    daemon.say(json.dumps({"text": "Doorbell!", "id": "b-alert", "priority": "alert"}))
    daemon.say("", topic="stop")
    probe.wait(
        f"{daemon.base}/events",
        lambda e: e["id"] == "b-long" and e["event"] in ("stopped", "finished"),
        timeout=20,
    )
    time.sleep(2.0)
    long_events = probe.events(daemon.base, "b-long")
    assert long_events[-1] == "stopped" and "finished" not in long_events
    assert long_events.count("started") == 1  # never resumed after the stop


def test_stop_for_an_unknown_id_is_answered(paced_daemon, probe) -> None:
    daemon = paced_daemon
    daemon.say(json.dumps({"id": "no-such-utterance"}), topic="stop")
    error = probe.wait(f"{daemon.base}/error", lambda e: e["id"] == "no-such-utterance")[0]
    assert "no utterance" in error["error"]
