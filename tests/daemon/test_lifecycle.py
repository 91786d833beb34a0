"""The daemon process's lifecycle: signals, an honest self-test with a warm cache, and
nothing private left on disk."""

from __future__ import annotations

import json
import signal
import socket

import pytest

from ..harness import Probe, make_daemon


def test_warm_cache_restart_signals_and_privacy(tmp_path, broker, prepared_state) -> None:
    state = tmp_path / "state"
    state.mkdir()
    for item in prepared_state.iterdir():  # the split graphs, without copying them again
        (state / item.name).symlink_to(item)
    settings = {"engine__cache_mb": "8", "engine__cache_disk": "true"}
    daemon = make_daemon(tmp_path / "d", broker.port, state, **settings)
    daemon.env["MAGPIE_TTS_ENGINE__STATE_DIR"] = str(state)
    probe = Probe(broker.port, [f"{daemon.base}/#"])
    try:
        daemon.start()
        secret = "Your door code is four four seven one, do not share it."
        daemon.say(json.dumps({"text": secret, "id": "secret"}))
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "secret" and e["event"] == "finished"
        )
        phrases = state / "phrases"
        hot = sorted(p.name for p in phrases.glob("*.pcm"))
        assert hot, "the configured hot phrases are kept when disk caching is on"
        # SIGHUP: reloads, keeps serving
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.say(json.dumps({"text": "Still here after a hangup.", "id": "hup"}))
        probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "hup" and e["event"] == "finished")
        assert daemon.alive()
        # SIGTERM while speaking, with a request queued: both end with an event, exit 0
        daemon.say(json.dumps({"text": "A long goodbye. " * 12, "id": "bye"}))
        daemon.say(json.dumps({"text": "Queued behind it.", "id": "behind"}))
        probe.wait(f"{daemon.base}/events", lambda e: e["id"] == "bye" and e["event"] == "started")
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(10) == 0
        for request_id in ("bye", "behind"):
            last = probe.wait(
                f"{daemon.base}/events",
                lambda e, r=request_id: e["id"] == r and e["event"] in ("stopped", "finished"),
            )[-1]
            assert last["event"] == "stopped" and last["reason"] == "shutdown"
        log = daemon.log()
        assert "stopped" in log
        assert secret not in log and "door code" not in log  # no spoken text at INFO
        # nothing of the unique sentence reached the disk: only the hot phrases are there
        assert sorted(p.name for p in phrases.glob("*.pcm")) == hot
        # second start with the warm cache: the self-test still measures synthesis
        daemon.proc = None
        daemon.start()
        status = probe.wait(
            f"{daemon.base}/status",
            lambda s: s.get("state") == "online" and s.get("pid") == daemon.proc.pid,
        )[-1]
        selftest = status["selftest"]
        assert selftest["measured"].startswith("synthesis")
        # cache hits measured 0.6 ms first audio and RTF 0.0003 before this was fixed
        assert selftest["first_audio_ms"] > 5 and selftest["rtf"] > 0.005
    finally:
        probe.close()
        daemon.stop()


@pytest.mark.parametrize("frontend", ["wyoming", "http"])
def test_a_port_in_use_fails_the_start_with_its_reason(
    tmp_path, broker, prepared_state, frontend
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = {f"{frontend}__enabled": "true", f"{frontend}__port": str(port)}
        daemon = make_daemon(tmp_path, broker.port, prepared_state, **settings)
        daemon.start(wait_online=False)
        assert daemon.proc.wait(90) == 1
    assert f"{port}: cannot listen" in daemon.log() and "address already in use" in daemon.log()
