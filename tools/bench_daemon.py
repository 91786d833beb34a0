"""The daemon as a bench peer: `magpie-tts run` with a private broker, measuring
synthesis (no phrase cache, no rate limits), one frontend on a free port."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .processes import Broker, DaemonProcess, daemon_env, free_port, stop_all, wait_port


def wait_listening(
    port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 120
) -> None:
    """Wait for a peer to listen; a bench stops with one line if it does not."""
    try:
        wait_port(port, timeout, proc)
    except (RuntimeError, TimeoutError):
        raise SystemExit(f"{what} did not start listening on {port}") from None


def start_magpie(
    folder: Path, state_dir: Path, frontend: str, settings: dict[str, str] | None = None
) -> tuple[list[subprocess.Popen[bytes]], int]:
    """Start the daemon with only `frontend` ("wyoming", "http" or "grpc") listening; its port.
    `settings`: more `section__key` settings, as daemon_env takes them."""
    broker = Broker(folder).start()
    port = free_port()
    env = daemon_env(
        folder,
        broker.port,
        state_dir,
        **{
            "mqtt__client_id": f"bench-{frontend}-{os.getpid()}",
            "mqtt__ha_discovery": "false",
            "audio__device": "null",
            "wyoming__enabled": str(frontend == "wyoming").lower(),
            "http__enabled": str(frontend == "http").lower(),
            "grpc__enabled": str(frontend == "grpc").lower(),
            f"{frontend}__port": str(port),
            "engine__cache_mb": "0",  # measure synthesis, not the cache
            "limits__rate_per_minute": "100000",
            "log_level": "WARNING",
            **(settings or {}),
        },
    )
    procs = [DaemonProcess(env).start().proc, broker.proc]
    try:
        wait_listening(port, procs[0], "magpie-tts")
    except SystemExit:
        stop_all(procs)
        raise
    return procs, port
