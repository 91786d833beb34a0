"""Real parts for daemon tests: a private mosquitto, test ALSA PCMs, the daemon process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from magpie_tts.tools.processes import (  # noqa: F401  (re-exported: tests import them from here)
    MAGPIE,
    Broker,
    DaemonProcess,
    daemon_env,
    free_port,
    wait_port,
)

REPO = Path(__file__).resolve().parent.parent
# Synthesis noise is seeded: a test hears the same audio on every run and machine, so an
# intelligibility check cannot pass or fail by the draw.
SEED = 7


def publish(port: int, topic: str, message: bytes | str, *args: str) -> None:
    """Publish with the real mosquitto_pub (QoS 1)."""
    data = message.encode() if isinstance(message, str) else message
    source = "-s" if data else "-n"  # -n: a zero-length message
    cmd = ["mosquitto_pub", "-p", str(port), "-q", "1", "-t", topic, source, *args]
    subprocess.run(cmd, input=data, check=True, timeout=10)


@dataclass
class Message:
    topic: str
    payload: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.payload)


class Probe:
    """A paho subscriber that records everything under the given topics."""

    def __init__(self, port: int, topics: list[str], **connect: Any) -> None:
        self.messages: list[Message] = []
        self._cond = threading.Condition()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"probe-{time.time_ns()}"
        )
        if connect.get("username"):
            self.client.username_pw_set(connect["username"], connect.get("password"))
        if connect.get("ca"):
            self.client.tls_set(ca_certs=str(connect["ca"]))
        self.client.on_message = self._on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: subscribed.set()
        # (Re)subscribe on every connect: the probe follows broker restarts too.
        self.client.on_connect = lambda c, *a: c.subscribe([(t, 1) for t in topics])
        self.client.reconnect_delay_set(0.2, 1)
        self.client.connect("127.0.0.1" if not connect.get("host") else connect["host"], port)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise TimeoutError("probe could not subscribe")

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(Message(message.topic, message.payload, time.monotonic()))
            self._cond.notify_all()

    def find(self, topic: str, predicate: Callable[[Any], bool] = lambda _: True) -> list[Any]:
        with self._cond:
            found = []
            for m in self.messages:
                if m.topic != topic:
                    continue
                try:
                    data = m.json()
                except ValueError:
                    continue
                if predicate(data):
                    found.append(data)
            return found

    def wait(
        self,
        topic: str,
        predicate: Callable[[Any], bool] = lambda _: True,
        timeout: float = 30.0,
        count: int = 1,
    ) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = self.find(topic, predicate)
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"waited {timeout}s for {count} on {topic}; got {len(found)}: {found[-3:]}"
                    )
                self._cond.wait(min(remaining, 0.2))

    def events(self, base: str, request_id: str) -> list[str]:
        return [e["event"] for e in self.find(f"{base}/events", lambda e: e["id"] == request_id)]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


ASOUNDRC = """\
pcm.ttstap {{ type file  slave.pcm "null"  file "{tap}"  format "raw"  truncate true }}
pcm.ttspaced {{ type file  slave.pcm "null"  format "raw"
               file "|pv -q -B 4096 -L 44100 > {paced}" }}
pcm.ttspulse {{ type pulse  server "unix:{pulse_socket}"  handle_underrun true }}
"""


class Daemon(DaemonProcess):
    """The daemon under test: its ALSA PCMs and log in `folder`, its topics under `base`;
    with HTTP (make_http_daemon) its `url` and a `client` on it."""

    def __init__(self, folder: Path, port: int, base: str, env: dict[str, str]) -> None:
        super().__init__(env, folder / "daemon.log", cwd=folder)
        self.folder = folder
        self.port = port
        self.base = base
        self.url = ""
        self.client: Any = None  # an httpx.Client on `url`

    @property
    def tap(self) -> Path:
        return self.folder / "tap.raw"

    @property
    def paced(self) -> Path:
        return self.folder / "paced.raw"

    def start(self, wait_online: bool = True) -> Daemon:
        super().start()
        if wait_online:
            pid = self.proc.pid
            probe = Probe(self.port, [f"{self.base}/status"])
            try:
                probe.wait(
                    f"{self.base}/status",
                    lambda s: s.get("state") == "online" and s.get("pid") == pid,
                    timeout=60,
                )
            finally:
                probe.close()
        return self

    def say(self, message: bytes | str, topic: str = "say") -> None:
        full = topic if topic.startswith("hermes/") else f"{self.base}/{topic}"
        publish(self.port, full, message)

    def recorded(self, path: Path | None = None) -> np.ndarray:
        data = (path or self.tap).read_bytes() if (path or self.tap).exists() else b""
        return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2")


def make_daemon(
    folder: Path, port: int, state_dir: Path, device: str = "ttstap", **settings: str
) -> Daemon:
    folder.mkdir(parents=True, exist_ok=True)
    asoundrc = folder / "asoundrc"
    asoundrc.write_text(
        ASOUNDRC.format(
            tap=folder / "tap.raw", paced=folder / "paced.raw", pulse_socket=folder / "pulse.sock"
        )
    )
    base = f"t{time.time_ns() % 10**9}"
    defaults = {
        "mqtt__base_topic": base,
        "mqtt__client_id": f"magpie-{base}",
        "audio__device": device,
        "engine__provider": "cpu",
        "engine__cache_mb": "0",
        "engine__seed": str(SEED),  # the same audio every run
        # no INT8 prepared in the background in every test's daemon (test_int8_background)
        "engine__int8": "fp32",
        "wyoming__enabled": "false",  # a test that needs it sets a free port
        "http__enabled": "false",
        # Tests compare what the speaker played: no earcon ahead of slow speech on a busy
        # machine (test_earcon.py turns it on), and the lanes of old unless asked for.
        "audio__earcon": "false",
        "engine__workers": "0",
        # Admission as fixed as before: a capacity and a shedding measured on a loaded
        # test machine would refuse what a test means to be served (the tests of
        # capacity and shedding set these: test_shedding_daemon.py, test_capacity.py).
        "limits__max_streams": "8",
        "limits__first_audio_budget_ms": "0",
    }
    env = daemon_env(folder, port, state_dir, **{**defaults, **settings})
    env.pop("NOTIFY_SOCKET", None)
    env["ALSA_CONFIG_PATH"] = f"/usr/share/alsa/alsa.conf:{asoundrc}"
    env["PYTHONUNBUFFERED"] = "1"
    return Daemon(folder, port, base, env)


def make_http_daemon(folder: Path, port: int, state_dir: Path, **settings: str) -> Daemon:
    """make_daemon with HTTP on a free port: the daemon's `url`, and an httpx `client`
    on it (120 s timeout: a busy test machine)."""
    import httpx

    http_port = free_port()
    daemon = make_daemon(
        folder, port, state_dir, http__enabled="true", http__port=str(http_port), **settings
    )
    daemon.url = f"http://127.0.0.1:{http_port}"
    daemon.client = httpx.Client(base_url=daemon.url, timeout=120)
    return daemon


class PulseSink:
    """A PulseAudio null sink on a private socket: a paced device that can underrun and
    can vanish (kill it) and come back, as a USB or Bluetooth speaker does."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "pulse.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PulseSink:
        runtime = self.folder / "pulse-runtime"
        runtime.mkdir(exist_ok=True)
        env = {**os.environ, "HOME": str(runtime), "XDG_RUNTIME_DIR": str(runtime)}
        log = (self.folder / "pulse.log").open("ab")
        self.proc = subprocess.Popen(
            [
                "pulseaudio",
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disable-shm=yes",
                "--use-pid-file=no",
                "--log-target=stderr",
                f"--load=module-native-protocol-unix socket={self.socket} auth-anonymous=1",
                "--load=module-null-sink sink_name=magpie",
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 15
        while not self.socket.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("pulseaudio did not start: " + self.log())
            time.sleep(0.05)
        return self

    def log(self) -> str:
        path = self.folder / "pulse.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        self.socket.unlink(missing_ok=True)


def have(program: str) -> bool:
    return shutil.which(program) is not None
