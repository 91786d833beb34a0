"""The daemon under the container's settings, without a container engine: the final
stage's ENV of the Containerfile, MQTT off as the Kubernetes replicas run (no broker at
all), and the root filesystem read-only but for the state volume (a private mount
namespace: `unshare -m`, then a read-only remount of / inside it). It must load, say ready
on /health/ready and speak over HTTP, writing nowhere but its state. (The image's USER is
checked in test_deploy.py; this machine's Python lives where only root may read.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from ..harness import MAGPIE, free_port
from ..test_deploy import ROOT, instructions

READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro / && exec "$@"'


def read_only_works() -> bool:
    """Whether `unshare -m` and a read-only remount work here (root on Linux)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    check = ["unshare", "-m", "sh", "-c", 'mount -o remount,bind,ro / && ! touch "$0"', "/x"]
    return subprocess.run(check, capture_output=True).returncode == 0


def image_env() -> dict[str, str]:
    steps = instructions(ROOT / "Containerfile")
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    found: dict[str, str] = {}
    for word, rest in steps[last_from:]:
        if word == "ENV":
            found.update(re.findall(r"(\w+)=(\S+)", rest))
    return {k: v for k, v in found.items() if k.startswith("MAGPIE_TTS_")}


@pytest.mark.slow
@pytest.mark.skipif(not read_only_works(), reason="no private mount namespace here (needs root)")
def test_the_daemon_serves_as_the_image_runs_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    port = free_port()
    settings = image_env()
    assert settings["MAGPIE_TTS_ENGINE__STATE_DIR"] == "/var/lib/magpie-tts"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(state),
        **settings,
        "MAGPIE_TTS_ENGINE__STATE_DIR": str(state),  # the volume
        "MAGPIE_TTS_HTTP__HOST": "127.0.0.1",  # (0.0.0.0 in the image)
        "MAGPIE_TTS_HTTP__PORT": str(port),
        "MAGPIE_TTS_WYOMING__HOST": "127.0.0.1",
        "MAGPIE_TTS_WYOMING__PORT": str(free_port()),
        "MAGPIE_TTS_GRPC__HOST": "127.0.0.1",
        "MAGPIE_TTS_GRPC__PORT": str(free_port()),
        "MAGPIE_TTS_MQTT__ENABLED": "false",
        "MAGPIE_TTS_MQTT__PORT": str(free_port()),  # nothing there: it must not try
        "MAGPIE_TTS_SELFTEST__ENABLED": "false",
        "MAGPIE_TTS_ENGINE__PROVIDER": "cpu",
    }
    log = (tmp_path / "daemon.log").open("wb")
    command = ["unshare", "-m", "sh", "-c", READ_ONLY, str(state), MAGPIE, "run"]
    proc = subprocess.Popen(command, env=env, cwd=state, stdout=log, stderr=log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
                try:
                    if client.get("/health/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()
                time.sleep(0.3)
            ask = {"input": "Hello from the image.", "response_format": "wav"}
            speech = client.post("/v1/audio/speech", json=ask)
            assert speech.status_code == 200 and len(speech.content) > 22050
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
        log.close()
    written = {p.relative_to(state).parts[0] for p in state.rglob("*")}
    assert written  # the split graphs went to the volume
