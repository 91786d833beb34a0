"""A private mosquitto on a free loopback port, for the demo and the soak tool."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def private_broker(folder: Path, extra_conf: str = "") -> tuple[subprocess.Popen[bytes], int]:
    """Start mosquitto (no persistence, anonymous, loopback only); wait until it listens."""
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(
        f"persistence false\nlog_dest none\nlistener {port} 127.0.0.1\nallow_anonymous true\n"
        + extra_conf
    )
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)])
    for _ in range(100):
        if listening(port):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("could not start a private mosquitto")
