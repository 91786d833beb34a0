"""The service: builds the parts (voices, player, core, frontends) and reports status.

The path of one utterance: a frontend parses a message into an `Ask` and calls the core
(`core/core.py`); the core validates it with the engine's text policy, queues it, and its
worker streams the engine's chunks into the player (`player.py`), which writes ALSA.
Events flow back from the core to the frontend that asked, and to this service, which
keeps the status up to date.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .config import Config
from .core.core import Core, CoreLimits
from .core.utterance import Event, Utterance
from .frontends.mqtt.frontend import MqttFrontend
from .frontends.wyoming.server import WyomingServer, build_info
from .metrics import Metrics
from .player import Player
from .voices import VoiceRegistry, text_policy

VERSION = "0.2.0"


class Service:
    def __init__(self, config: Config, registry: VoiceRegistry | None = None) -> None:
        self.config = config
        self.registry = registry or VoiceRegistry(config)
        self.selftest: dict[str, Any] | None = None
        self.degraded: str | None = None
        self.stale_s = 10.0
        self.player = Player(config.audio, self._audio_error, self._audio_ok)
        self.metrics = Metrics()
        limits = config.limits
        self.core = Core(
            self.registry,
            self.player,
            text_policy(config),
            CoreLimits(
                limits.max_queue, limits.rate_per_minute, limits.stream_idle_s, limits.max_streams
            ),
            monitor=self,
            on_refused=self.metrics.refused,
        )
        self._gauges()
        self.mqtt = MqttFrontend(config, self.core, self.status, self._offline(), VERSION)
        self.wyoming = (
            WyomingServer(config, self.core, lambda: build_info(self.registry.catalogue(), VERSION))
            if config.wyoming.enabled
            else None
        )

    def _gauges(self) -> None:
        gauge = self.metrics.gauge
        gauge(
            "magpie_queue_depth", "Utterances waiting for the speaker", lambda: len(self.core.queue)
        )
        gauge(
            "magpie_active_streams",
            "Audio streams to clients now",
            lambda: self.core.active_streams,
        )
        gauge(
            "magpie_speaking", "1 while the speaker plays", lambda: float(bool(self.core.speaking))
        )
        gauge("magpie_xruns", "ALSA underruns since start", lambda: self.player.output.xruns)
        gauge("magpie_healthy", "1 when ok, 0 when degraded or stuck", lambda: float(self._ok()))

        def cache_hits() -> float:
            cache = self.registry.default.phrase_cache
            return cache.hits if cache is not None else 0

        gauge("magpie_phrase_cache_hits", "Phrase-cache hits since start", cache_hits)

    def _ok(self) -> bool:
        return self.healthy and not self.problems()

    def refused(self, frontend: str, kind: str) -> None:
        self.core.refused(frontend, kind)

    def _offline(self) -> dict[str, Any]:
        return {"state": "offline", "version": VERSION}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start every part; if one cannot start (a port in use, a broker refusing us),
        close what was started and raise."""
        self.player.start()
        self.core.start()
        try:
            if self.wyoming is not None:
                self.wyoming.start()  # before MQTT: a port in use fails the start cleanly
            self.mqtt.start()
        except Exception:
            self.player.close()
            if self.wyoming is not None:
                self.wyoming.stop()
            raise

    def shutdown(self) -> None:
        """Stop what plays, conclude what waits (each gets its event), then disconnect."""
        self.core.shutdown()
        self.player.close()
        if self.wyoming is not None:
            self.wyoming.stop()
        self.mqtt.stop()

    @property
    def healthy(self) -> bool:
        """False when the synth or player thread is stuck (drives the systemd watchdog)."""
        now = time.monotonic()
        worker_ok = self.core.worker_alive and now - self.core.heartbeat < self.stale_s
        player_ok = self.player.idle or now - self.player.heartbeat < self.stale_s
        return worker_ok and player_ok

    # -- status -----------------------------------------------------------------------------

    def problems(self) -> list[str]:
        found = [self.degraded] if self.degraded else []
        if self.player.device_error:
            found.append(f"audio: {self.player.device_error}")
        return found

    def status(self) -> dict[str, Any]:
        synth = self.registry.default
        problems = self.problems()
        status: dict[str, Any] = {
            "state": "online",
            "version": VERSION,
            "pid": os.getpid(),
            "health": "degraded" if problems else "ok",
            "voice": synth.voice.name,
            "model_hash": synth.voice.model_hash,
            "provider": synth.choice.used,
            "providers": synth.providers,  # what runs each graph
            "provider_requested": synth.choice.requested,
            "precision": synth.precision,
            "precisions": synth.precisions,  # per graph: the INT8 flow shows here
            "queue_depth": len(self.core.queue),
            "speaking": self.core.speaking,
            "xruns": self.player.output.xruns,
            "audio": self.player.device_error or "ok",
            "mqtt_reconnects": self.mqtt.reconnects,
            **self.core.stats.summary(),
            "streams": {"active": self.core.active_streams, **self.core.client_stats.summary()},
        }
        cache = synth.phrase_cache
        if cache is not None:
            status["phrase_cache"] = {
                "hits": cache.hits,
                "misses": cache.misses,
                "entries": cache.entries,
            }
        if problems:
            status["degraded"] = "; ".join(problems)
        if synth.choice.warning:
            status["provider_warning"] = synth.choice.warning
        if self.selftest is not None:
            status["selftest"] = self.selftest
        return status

    def report(self, utterance: Utterance, event: Event) -> None:
        """Every utterance's events (the core's monitor): status follows the queue."""
        self.metrics.observe(utterance, event)
        if utterance.audio_out is None and utterance.sink is not self.mqtt:
            # Speech on the speaker asked for elsewhere (HTTP /v1/say, the audible
            # self-test): its events go to <base>/events as well, like MQTT's own.
            self.mqtt.report(utterance, event)
        if event.terminal or event.name == "interrupted":
            self.mqtt.publish_status()

    def _audio_error(self, message: str) -> None:
        self.mqtt.audio_error(message)

    def _audio_ok(self) -> None:
        self.mqtt.publish_status()
