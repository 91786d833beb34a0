"""Real parts for daemon tests: a private mosquitto, test ALSA PCMs, the daemon process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt

REPO = Path(__file__).resolve().parent.parent
MAGPIE = str(Path(sys.executable).with_name("magpie-tts"))
# Synthesis noise is seeded: a test hears the same audio on every run and machine, so an
# intelligibility check cannot pass or fail by the draw.
SEED = 7


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


class Broker:
    """mosquitto on a free loopback port; restartable on the same port."""

    def __init__(
        self, folder: Path, extra_conf: str = "", port: int | None = None, persistent: bool = False
    ) -> None:
        self.folder = folder
        self.port = port or free_port()
        self.conf = folder / "mosquitto.conf"
        persistence = "persistence false\n"
        if persistent:  # sessions and queued QoS 1 messages survive a restart
            persistence = f"persistence true\npersistence_location {folder}/\nautosave_interval 1\n"
        self.conf.write_text(
            # user root: as root, mosquitto would drop to `mosquitto`, who cannot read
            # pytest's private temp folders (password, ACL and key files live there).
            "user root\nper_listener_settings false\nlog_dest stderr\n"
            + persistence
            + f"listener {self.port} 127.0.0.1\n"
            + (extra_conf or "allow_anonymous true\n")
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Broker:
        log = (self.folder / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stdout=log, stderr=log)
        wait_port(self.port)
        return self

    def stop(self, graceful: bool = False) -> None:
        if self.proc is not None:
            if graceful:
                self.proc.terminate()
            else:
                self.proc.kill()
            self.proc.wait(10)
            self.proc = None


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


@dataclass
class Daemon:
    folder: Path
    port: int
    base: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.folder / "daemon.log"

    @property
    def tap(self) -> Path:
        return self.folder / "tap.raw"

    @property
    def paced(self) -> Path:
        return self.folder / "paced.raw"

    def start(self, wait_online: bool = True) -> Daemon:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [MAGPIE, "run"], env=self.env, stdout=log, stderr=log, cwd=self.folder
        )
        if wait_online:
            probe = Probe(self.port, [f"{self.base}/status"])
            try:
                probe.wait(
                    f"{self.base}/status",
                    lambda s: s.get("state") == "online" and s.get("pid") == self.proc.pid,
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

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        code = self.proc.returncode
        self.proc = None
        return code


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGPIE_TTS_")}
    env.pop("NOTIFY_SOCKET", None)
    env.update(
        {
            "ALSA_CONFIG_PATH": f"/usr/share/alsa/alsa.conf:{asoundrc}",
            "MAGPIE_TTS_CONFIG": str(folder / "absent-is-fine.toml"),
            "MAGPIE_TTS_MQTT__PORT": str(port),
            "MAGPIE_TTS_MQTT__BASE_TOPIC": base,
            "MAGPIE_TTS_MQTT__CLIENT_ID": f"magpie-{base}",
            "MAGPIE_TTS_AUDIO__DEVICE": device,
            "MAGPIE_TTS_ENGINE__STATE_DIR": str(state_dir),
            "MAGPIE_TTS_ENGINE__PROVIDER": "cpu",
            "MAGPIE_TTS_ENGINE__CACHE_MB": "0",
            "MAGPIE_TTS_ENGINE__SEED": str(SEED),  # the same audio every run
            "MAGPIE_TTS_WYOMING__ENABLED": "false",  # a test that needs it sets a free port
            "MAGPIE_TTS_HTTP__ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({f"MAGPIE_TTS_{k.upper()}": v for k, v in settings.items()})
    (folder / "absent-is-fine.toml").write_text("")
    return Daemon(folder, port, base, env)


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
