"""The daemon as a bench peer: `magpie-tts run` with a private broker, measuring
synthesis (no phrase cache, no rate limits), one frontend on a free port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .broker import free_port, listening, private_broker


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not listening(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start listening on {port}")
        time.sleep(0.1)


def start_magpie(
    folder: Path, state_dir: Path, frontend: str, settings: dict[str, str] | None = None
) -> tuple[list[subprocess.Popen[bytes]], int]:
    """Start the daemon with only `frontend` ("wyoming" or "http") listening; its port."""
    broker, mqtt_port = private_broker(folder)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGPIE_TTS_")}
    env.update(
        {
            "MAGPIE_TTS_CONFIG": str(folder / "none.toml"),
            "MAGPIE_TTS_MQTT__PORT": str(mqtt_port),
            "MAGPIE_TTS_MQTT__CLIENT_ID": f"bench-{frontend}-{os.getpid()}",
            "MAGPIE_TTS_MQTT__HA_DISCOVERY": "false",
            "MAGPIE_TTS_AUDIO__DEVICE": "null",
            "MAGPIE_TTS_WYOMING__ENABLED": str(frontend == "wyoming").lower(),
            "MAGPIE_TTS_HTTP__ENABLED": str(frontend == "http").lower(),
            f"MAGPIE_TTS_{frontend.upper()}__PORT": str(port),
            "MAGPIE_TTS_ENGINE__STATE_DIR": str(state_dir),
            "MAGPIE_TTS_ENGINE__CACHE_MB": "0",  # measure synthesis, not the cache
            "MAGPIE_TTS_LIMITS__RATE_PER_MINUTE": "100000",
            "MAGPIE_TTS_LOG_LEVEL": "WARNING",
            **(settings or {}),
        }
    )
    (folder / "none.toml").write_text("")
    magpie = str(Path(sys.executable).with_name("magpie-tts"))
    proc = subprocess.Popen([magpie, "run"], env=env)
    wait_port(port, proc, "magpie-tts")
    return [proc, broker], port


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
