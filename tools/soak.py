"""Soak: many short utterances through MQTT into an ALSA file PCM; RSS at start and end.

    python -m magpie_tts.tools.soak --count 10000

Starts a private mosquitto and the daemon (as `magpie-tts run`), publishes QoS 1 requests
as fast as the daemon finishes them (a small window in flight), and reports the daemon's
RSS after warm-up and at the end, the growth, errors, and time-to-first-frame medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from .processes import Broker, DaemonProcess, daemon_env

PHRASES = (
    "Okay.",
    "Timer done.",
    "The lights are off.",
    "It is twenty degrees.",
    "Sure thing.",
    "Playing music.",
    "Door locked.",
    "Good night.",
    "You have one message.",
    "Done.",
)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Soak:
    def __init__(self, folder: Path, state_dir: Path | None) -> None:
        self.folder = folder
        self.broker = Broker(folder, "allow_anonymous true\nmax_queued_messages 100000\n").start()
        self.port = self.broker.port
        self.base = "soak"
        env = daemon_env(
            folder,
            self.port,
            state_dir,
            mqtt__base_topic=self.base,
            mqtt__client_id=f"soak-{os.getpid()}",
            audio__device=f"file:FILE={folder / 'soak.raw'},FORMAT=raw",
            engine__cache_mb="0",
            wyoming__enabled="false",
            http__enabled="false",
            engine__provider="cpu",
            limits__rate_per_minute="100000000",
            limits__max_queue="1000",
        )
        self.daemon = DaemonProcess(env, folder / "daemon.log").start()
        self.pid = self.daemon.proc.pid
        self.done: dict[str, dict[str, Any]] = {}
        self.errors: list[dict[str, Any]] = []
        self.online = threading.Event()
        self.cond = threading.Condition()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"soaker-{os.getpid()}"
        )
        self.client.on_connect = lambda c, *a: c.subscribe(
            [(f"{self.base}/events", 1), (f"{self.base}/error", 1), (f"{self.base}/status", 1)]
        )
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        data = json.loads(message.payload)
        with self.cond:
            if message.topic.endswith("/status"):
                if data.get("state") == "online" and data.get("pid") == self.pid:
                    self.online.set()
            elif message.topic.endswith("/error"):
                self.errors.append(data)
            elif data.get("event") in ("finished", "error", "stopped"):
                self.done[data["id"]] = data
            self.cond.notify_all()

    def run(
        self, count: int, window: int = 8, warmup: int = 50, progress: bool = True
    ) -> dict[str, Any]:
        if not self.online.wait(120):
            raise RuntimeError("daemon did not come online")
        start_rss = None
        started = time.monotonic()
        for index in range(count):
            with self.cond:
                while index - len(self.done) >= window:
                    if not self.cond.wait(60):
                        raise RuntimeError(f"stalled at {index}: {len(self.done)} done")
            if index == warmup:
                with self.cond:
                    self.cond.wait_for(lambda: len(self.done) >= warmup, 60)
                start_rss = rss_kb(self.pid)
            payload = json.dumps({"text": PHRASES[index % len(PHRASES)], "id": f"u{index}"})
            self.client.publish(f"{self.base}/say", payload, qos=1)
            if progress and index and index % 1000 == 0:
                print(
                    f"{index} published, RSS {rss_kb(self.pid) / 1024:.1f} MB",
                    file=sys.stderr,
                    flush=True,
                )
        with self.cond:
            self.cond.wait_for(lambda: len(self.done) >= count, 120)
        end_rss = rss_kb(self.pid)
        elapsed = time.monotonic() - started
        finished = [d for d in self.done.values() if d["event"] == "finished"]
        ttfa = [d["ttfa_ms"] for d in finished if d.get("ttfa_ms") is not None]
        start_rss = start_rss or end_rss
        return {
            "utterances": count,
            "finished": len(finished),
            "errors": len(self.errors),
            "error_samples": self.errors[:3],
            "alive": self.daemon.alive(),
            "rss_start_mb": round(start_rss / 1024, 1),
            "rss_end_mb": round(end_rss / 1024, 1),
            "rss_growth_pct": round(100 * (end_rss - start_rss) / start_rss, 2),
            # message arrival → first frame handed to ALSA (includes queueing if window > 1)
            "ttfa_ms_median": round(statistics.median(ttfa), 1) if ttfa else None,
            "ttfa_ms_p95": round(statistics.quantiles(ttfa, n=20)[-1], 1)
            if len(ttfa) > 20
            else None,
            "seconds": round(elapsed, 1),
        }

    def close(self) -> None:
        self.client.loop_stop()
        self.daemon.stop()
        self.broker.stop(graceful=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument(
        "--window",
        type=int,
        default=8,
        help="requests in flight; 1 measures publish → first ALSA frame without queueing",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="magpie-soak-") as tmp:
        soak = Soak(Path(tmp), args.state_dir)
        try:
            result = soak.run(args.count, window=args.window, warmup=min(50, args.count // 2))
        finally:
            soak.close()
    print(json.dumps(result, indent=2))
    ok = result["alive"] and not result["errors"] and result["rss_growth_pct"] < 5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
