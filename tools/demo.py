"""`make run`: start the daemon against a local broker, publish one sentence, wait for it.

Uses a broker on 127.0.0.1:1883 when one answers, else a private mosquitto on a free
loopback port. Speaks on ALSA's default device, or, where no sound card exists, into a WAV
through ALSA's file plugin, whose path it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from .processes import Broker, DaemonProcess, listening

BASE = "magpie"


def _sound_card() -> bool:
    probe = [
        "aplay",
        "-q",
        "-D",
        "default",
        "-t",
        "raw",
        "-f",
        "S16_LE",
        "-r",
        "22050",
        "-c",
        "1",
        "/dev/null",
    ]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Watch:
    def __init__(self, port: int) -> None:
        self.messages: list[tuple[str, dict]] = []
        self.cond = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"demo-{os.getpid()}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.subscribe([(f"{BASE}/status", 1), (f"{BASE}/events", 1), (f"{BASE}/error", 1)])
        self.client.loop_start()

    def _on_message(self, _c, _u, message) -> None:  # type: ignore[no-untyped-def]
        try:
            data = json.loads(message.payload)
        except ValueError:
            return
        with self.cond:
            self.messages.append((message.topic, data))
            self.cond.notify_all()

    def latest(self, suffix: str) -> dict:
        with self.cond:
            found = [data for topic, data in self.messages if topic.endswith(suffix)]
        return found[-1] if found else {}

    def wait(self, predicate, timeout: float) -> dict | None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        with self.cond:
            while time.monotonic() < deadline:
                for topic, data in self.messages:
                    if predicate(topic, data):
                        return data
                self.cond.wait(0.2)
        return None


def _precision(status: dict, online: dict) -> str:
    """Which precision spoke, and the background INT8 preparation's state (a daemon
    with no INT8 verdict prepares it while it serves fp32; docs/int8.md)."""
    status = status or online
    int8 = status.get("int8") or {}
    text = status.get("precision", "?")
    if int8.get("state") == "preparing":
        text += f" (INT8 being prepared in the background: {int8.get('progress_percent', 0)} %)"
    elif int8.get("reason") and status.get("precision") != "int8":
        text += f" ({int8['reason']})"
    return text


def main(argv: list[str]) -> int:
    force_wav = "--wav" in argv  # speak into the WAV even where a sound card exists
    args = [a for a in argv if a != "--wav"]
    text = args[0] if args else "Hello! Magpie is ready."
    build = Path("build").resolve()
    build.mkdir(exist_ok=True)
    env = dict(os.environ)
    wav = None
    if force_wav or not _sound_card():
        wav = build / "magpie-demo.wav"
        wav.unlink(missing_ok=True)
        env["MAGPIE_TTS_AUDIO__DEVICE"] = f"file:FILE={wav},FORMAT=wav"
        print(f"no sound card: speaking into {wav}")
    broker = None
    port = 1883
    if not listening(port):
        broker = Broker(Path(tempfile.mkdtemp(prefix="magpie-broker-"))).start()
        port = broker.port
        print(f"no broker on 127.0.0.1:1883: started a private mosquitto on port {port}")
    env.update(
        {
            "MAGPIE_TTS_MQTT__PORT": str(port),
            "MAGPIE_TTS_MQTT__HOST": "127.0.0.1",
            "MAGPIE_TTS_MQTT__CLIENT_ID": f"magpie-demo-{os.getpid()}",
            "MAGPIE_TTS_MQTT__BASE_TOPIC": BASE,
            "MAGPIE_TTS_WYOMING__ENABLED": "false",  # the demo speaks over MQTT only
            "MAGPIE_TTS_HTTP__ENABLED": "false",
        }
    )
    watch = Watch(port)
    daemon = DaemonProcess(env).start()  # its log on this terminal
    pid = daemon.proc.pid
    try:
        online = watch.wait(
            lambda t, d: (
                t.endswith("/status") and d.get("pid") == pid and d.get("state") == "online"
            ),
            timeout=120,
        )
        if online is None:
            print("daemon did not come online", file=sys.stderr)
            return 1
        selftest = online.get("selftest", {})
        print(
            f"daemon online: provider={online['provider']} precision={online['precision']} "
            f"self-test first audio {selftest.get('first_audio_ms')} ms"
        )
        subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-q",
                "1",
                "-t",
                f"{BASE}/say",
                "-m",
                text,
            ],
            check=True,
        )
        done = watch.wait(
            lambda t, d: (
                (t.endswith("/events") and d.get("event") in ("finished", "error"))
                or t.endswith("/error")
            ),
            timeout=120,
        )
        if not done or done.get("event") != "finished":
            print(f"speaking failed: {done}", file=sys.stderr)
            return 1
        print(
            f"spoke {done['duration_s']} s of audio; publish → first ALSA frame "
            f"{done['ttfa_ms']} ms; precision {_precision(watch.latest('/status'), online)}"
        )
    finally:
        daemon.stop(timeout=30)
        watch.client.loop_stop()
        if broker is not None:
            broker.stop(graceful=True)
    if wav is not None:
        print(f"spoken into {wav}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
