"""INT8 made by the daemon itself (daemon/int8auto.py), end to end: a daemon on a state
dir with no INT8 verdict serves fp32 at once, prepares INT8 in the background (a tiny
gate: engine.int8_gate_sentences = 2) and switches between utterances without dropping
one; the verdict is kept for the next start. (Which verdict a 2-sentence gate reaches
on a shared CPU is not the point: engine.int8 = "int8" speaks INT8 either way; the
verdict's own logic is unit-tested in tests/engine.) A preparation that cannot write its files
(a file-size limit, as a full disk) leaves fp32 serving with a warning."""

from __future__ import annotations

import json
import resource
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from ..harness import make_http_daemon
from .frontends.test_http import pcm_of_wav

TEXT = "The front door is locked and the alarm is set."
pytestmark = pytest.mark.slow


def fresh_state(prepared: Path, folder: Path) -> Path:
    """A state dir with the split graphs (built once per session) and no INT8 in it."""
    shutil.copytree(
        prepared / "models",
        folder / "models",
        ignore=shutil.ignore_patterns("*int8*", ".int8*", ".flow-*", "phrases"),
    )
    return folder


def start(folder: Path, broker, state: Path, wait: bool = True, int8: str = "auto", **settings):
    return make_http_daemon(
        folder,
        broker.port,
        state,
        selftest__enabled="false",
        engine__int8=int8,
        engine__int8_gate_sentences="2",
        http__rate_per_minute="100000",  # one client speaking back to back
        limits__rate_per_minute="100000",
        **settings,
    ).start(wait_online=wait)


def wait_health(client: httpx.Client, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = client.get("/health")
            if response.status_code == 200 and predicate(response.json()):
                return response.json()
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"/health did not get there in {timeout} s")


def speech(client: httpx.Client) -> int:
    body = {"input": TEXT, "voice": "alloy", "response_format": "wav"}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return len(pcm_of_wav(response.content)[1])


def test_a_fresh_daemon_serves_fp32_then_switches_to_int8_dropping_nothing(
    tmp_path_factory, broker, prepared_state
) -> None:
    folder = tmp_path_factory.mktemp("int8bg")
    state = fresh_state(prepared_state, folder / "state")
    # "int8": prepared like "auto", then spoken whatever the verdict: on a shared CPU a
    # 2-sentence race may measure the speed bound either way (1.14x here once).
    proc = start(folder, broker, state, int8="int8")
    try:
        first = proc.client.get("/health").json()
        assert first["precision"] == "fp32" and first["int8"]["state"] == "preparing"
        # Utterances back to back while it prepares and switches: each one whole.
        lengths: list[int] = []
        errors: list[BaseException] = []
        switched = threading.Event()

        def keep_speaking() -> None:
            try:
                while not switched.is_set():
                    lengths.append(speech(proc.client))
                    time.sleep(0.5)  # a busy speaker, not a saturated one: the idle job runs
            except BaseException as exc:  # the test's thread: fail the test, not the thread
                errors.append(exc)

        speaker = threading.Thread(target=keep_speaking)
        speaker.start()
        try:
            health = wait_health(proc.client, lambda h: h["int8"]["state"] != "preparing", 600)
        finally:
            switched.set()
            speaker.join(timeout=120)
        assert not errors, errors
        assert health["precision"] == "int8", health
        during = len(lengths)
        lengths.append(speech(proc.client))  # on INT8 now
        # The seed fixes the noise and durations stay fp32: every answer the same length.
        assert during >= 3 and len(set(lengths)) == 1, lengths
        metrics = proc.client.get("/metrics").text
        assert "magpie_int8 1.0" in metrics and "magpie_int8_progress 1.0" in metrics
        log = proc.log()
        assert "INT8 preparation: 100 %" in log and "now speaking with int8" in log
        assert log.count("INT8 preparation: ") <= 12  # by tenths, not a flood
        report = next(state.glob("models/*/int8_report.json"))
        verdict = json.loads(report.read_text())
        assert "passed" in verdict and verdict["key"]["onnxruntime"]
        assert "mos_fp32" in verdict and verdict["candidates"]
    finally:
        proc.stop()
    # The verdict is kept: the next start speaks INT8 at once, prepares nothing.
    again = start(tmp_path_factory.mktemp("int8bg-again"), broker, state, int8="int8")
    try:
        health = again.client.get("/health").json()
        assert health["precision"] == "int8" and health["int8"]["state"] == "int8"
        assert "INT8 preparation" not in again.log()
    finally:
        again.stop()


def test_a_preparation_that_cannot_write_leaves_fp32_serving_with_a_warning(
    tmp_path_factory, broker, prepared_state
) -> None:
    folder = tmp_path_factory.mktemp("int8full")
    state = fresh_state(prepared_state, folder / "state")
    proc = start(folder, broker, state, wait=False)
    # No file may grow past 1 MB, as on a full disk: the preparation's graphs cannot be
    # written (its process inherits the limit); the daemon itself writes no such file.
    limit = 1 << 20
    resource.prlimit(proc.proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    try:
        health = wait_health(proc.client, lambda h: h["int8"]["state"] != "preparing", 300)
        assert health["precision"] == "fp32" and health["int8"]["state"] == "fp32"
        assert "did not finish" in health["int8"]["reason"]
        assert "File too large" in health["int8"]["reason"]
        assert speech(proc.client) > 0  # fp32 keeps serving
        log = proc.log()
        assert "WARNING" in log and "fp32 keeps serving" in log
        assert not list(state.glob("models/*/int8_report.json"))  # no verdict: next start tries
        assert not list(state.glob("models/*/.int8*"))  # nothing half-made left behind
    finally:
        proc.stop()
