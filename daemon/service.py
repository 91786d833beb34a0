"""The service: builds the daemon's parts (voices, player, core, every frontend) and runs
their lifecycle: open → load → start → shutdown. It is the `Host` frontends see.

The path of one utterance: a frontend parses a message into an `Ask` and calls the core
(`core/core.py`); the core validates it with the engine's text policy, queues it, and
its speaker worker (`core/speaker.py`) streams the engine's chunks into the player
(`player.py`), which writes ALSA. Events flow back from the core to the frontend that
asked, and to this service (the core's monitor), which feeds the metrics and lets every
frontend observe them (MQTT keeps its retained status up to date).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from magpie_tts.engine import Lexicon, VoiceSummary, measured_speed, unknown_symbols

from . import VERSION
from .config import Config
from .core.core import Core, CoreLimits
from .core.utterance import Event, Utterance
from .frontends import FRONTENDS, Frontend
from .int8auto import Int8Background
from .metrics import Metrics
from .player import Player
from .voices import VoiceRegistry, text_policy

log = logging.getLogger(__name__)


class Service:
    def __init__(self, config: Config, registry: VoiceRegistry | None = None) -> None:
        """Build every part; nothing is loaded, opened or started yet (cheap)."""
        self.config = config
        self.version = VERSION
        self.registry = registry or VoiceRegistry(config)
        self.selftest: dict[str, Any] | None = None
        self.degraded: str | None = None
        self.stale_s = 10.0
        self.ready = False
        self.player = Player(config.audio, self._audio_changed, lambda: self._audio_changed(None))
        self.metrics = Metrics()
        limits = config.limits
        self.core = Core(
            self.registry,
            self.player,
            text_policy(config),
            CoreLimits(
                limits.max_queue,
                limits.rate_per_minute,
                limits.stream_idle_s,
                limits.stream_cap,
                limits.max_waiting_streams,
                limits.first_audio_budget_ms,
                config.audio.earcon_after_ms / 1000 if config.audio.earcon else None,
            ),
            monitor=self,
            on_refused=self.metrics.refused,
        )
        self.int8 = Int8Background(
            config, self.registry, self._health_changed, self.measure_capacity
        )
        self.registry.failover.on_event = self.metrics.failover
        self.registry.failover.on_change = self._health_changed
        self._gauges()
        self.frontends: list[Frontend] = [
            frontend(config, self) for frontend in FRONTENDS if frontend.enabled(config)
        ]
        self._started: list[Frontend] = []

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> None:
        """Start the frontends that answer while the voice loads (HTTP's /health says
        "loading"). If one cannot start (a port in use), close what started and raise."""
        self._start(f for f in self.frontends if f.answers_while_loading)

    def load(self) -> None:
        """Load and warm the default voice, read engine.lexicon (EngineError when either
        cannot be used), and size admission by its measured speed (core/capacity.py)."""
        self.measure_capacity(self.registry.load())
        self.reload_lexicon()

    def reload_lexicon(self) -> None:
        """Read engine.lexicon and check it against the default voice's phonemes; the
        lexicon in use is replaced only by one that passes (LexiconError names the line)."""
        path = self.config.engine.lexicon
        if path is None:
            return
        fresh = Lexicon.from_file(path)
        unknown_symbols(fresh.entries, self.registry.default.voice.phoneme_id_map)
        self.core.policy.lexicon.replace(fresh)
        log.info("lexicon: %d entries from %s", len(fresh), path)

    def measure_capacity(self, synth: Any) -> None:
        """Size client admission by the voice's measured speed (core/capacity.py); again
        whenever the default voice's graphs change (an INT8 switch)."""
        try:
            speed = measured_speed(synth)
        except (AttributeError, TypeError, ZeroDivisionError) as exc:  # nothing measured
            log.warning("stream capacity not measured (%s): %d", exc, self.core.capacity.limit)
            return
        limit = self.core.capacity.measure(speed, lambda: synth.first_turn_s)
        shown = self.core.capacity.describe()
        log.info(
            "stream capacity %d (%s: %s real-time streams on %s lane(s), lane RTF %s)",
            limit,
            "capped" if limit == self.config.limits.stream_cap else "measured",
            shown.get("real_time_streams"),
            shown.get("lanes"),
            shown.get("lane_rtf"),
        )

    def start(self) -> None:
        """Start the player, the core and the other frontends, then serve. If one cannot
        start (a port in use, a broker refusing us), close everything and raise."""
        self.player.start()
        self.core.start()
        self._start(f for f in self.frontends if not f.answers_while_loading)
        self.ready = True

    def _start(self, frontends: Iterable[Frontend]) -> None:
        try:
            for frontend in frontends:
                self._started.append(frontend)  # it may report as soon as it starts
                frontend.start()
        except Exception:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        """Stop what plays, conclude what waits (each gets its event), then stop the
        frontends, the last started first. Safe to call again, or before start."""
        self.int8.stop()  # a preparation stops; its partial files never count
        self.core.shutdown()  # from here on the core refuses new work: "shutting down"
        self.player.close()
        while self._started:
            frontend = self._started.pop()
            try:
                frontend.stop()
            except Exception:  # the others must still stop
                log.exception("stopping the %s frontend failed", frontend.name)
        self.ready = False

    @property
    def healthy(self) -> bool:
        """False when the synth or player thread is stuck (drives the systemd watchdog)."""
        now = time.monotonic()
        worker_ok = self.core.worker_alive and now - self.core.heartbeat < self.stale_s
        player_ok = self.player.idle or now - self.player.heartbeat < self.stale_s
        return worker_ok and player_ok

    # -- what frontends see (the Host) -------------------------------------------------------

    def catalogue(self) -> list[VoiceSummary]:
        return self.registry.catalogue()

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def problems(self) -> list[str]:
        found = [self.degraded] if self.degraded else []
        found += self.registry.problems()  # on the fallback voice
        if self.player.device_error:
            found.append(f"audio: {self.player.device_error}")
        return found

    def status(self) -> dict[str, Any]:
        synth = self.registry.default
        problems = self.problems()
        status: dict[str, Any] = {
            "state": "online",
            "version": self.version,
            "pid": os.getpid(),
            "health": "degraded" if problems else "ok",
            "voice": synth.voice.name,
            "voices_loaded": self.registry.loaded(),  # the default first
            "model_hash": synth.voice.model_hash,
            "provider": synth.choice.used,
            "providers": synth.providers,  # what runs each graph
            "provider_requested": synth.choice.requested,
            "precision": synth.precision,
            "precisions": synth.precisions,  # per graph: the INT8 flow shows here
            "int8": self.int8.status(),  # preparing (with its progress), int8, fp32, off
            "queue_depth": len(self.core.queue),
            "speaking": self.core.speaking,
            "xruns": self.player.output.xruns,
            "audio": self.player.device_error or "ok",
            **{
                key: value
                for frontend in self.frontends
                for key, value in frontend.status().items()
            },
            **self.core.stats.summary(),
            "streams": {"active": self.core.active_streams, **self.core.client_stats.summary()},
            "capacity": {**self.core.capacity.describe(), "shed": self.core.capacity.shed},
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
        fallback = self.registry.failover.fallback
        if fallback is not None:
            status["fallback"] = {"voice": fallback.voice.name, "provider": fallback.choice.used}
        if synth.choice.warning:
            status["provider_warning"] = synth.choice.warning
        if self.selftest is not None:
            status["selftest"] = self.selftest
        return status

    # -- events -------------------------------------------------------------------------------

    def report(self, utterance: Utterance, event: Event) -> None:
        """Every utterance's events (the core's monitor): metrics, then each frontend."""
        self.metrics.observe(utterance, event)
        for frontend in tuple(self._started):
            frontend.observe(utterance, event)

    def _audio_changed(self, problem: str | None) -> None:
        for frontend in tuple(self._started):
            frontend.audio_changed(problem)

    def _health_changed(self) -> None:
        for frontend in tuple(self._started):
            frontend.health_changed()

    def _gauges(self) -> None:
        gauge = self.metrics.gauge
        core = self.core
        gauge("magpie_queue_depth", "Utterances waiting for the speaker", lambda: len(core.queue))
        gauge("magpie_active_streams", "Audio streams to clients now", lambda: core.active_streams)
        gauge(
            "magpie_stream_capacity",
            "Client streams admitted at once (measured from the voice's speed, or capped)",
            lambda: core.capacity.limit,
        )
        gauge("magpie_speaking", "1 while the speaker plays", lambda: float(bool(core.speaking)))
        gauge(
            "magpie_voices_loaded",
            "Voices loaded, the default included (engine.max_voices besides it)",
            lambda: len(self.registry.loaded()),
        )
        gauge("magpie_xruns", "ALSA underruns since start", lambda: self.player.output.xruns)
        gauge(
            "magpie_on_fallback",
            "Problems that have the daemon speak with its fallback voice now: a voice that "
            "did not load, voices set aside after failures",
            lambda: len(self.registry.problems()),
        )
        gauge(
            "magpie_int8",
            "1 while the default voice speaks with its INT8 decoder, 0 on fp32",
            lambda: float(self._precision() == "int8"),
        )
        gauge(
            "magpie_int8_progress",
            "The background INT8 preparation, 0-1 (1 once done or when none is needed)",
            lambda: self.int8.progress if self.int8.state == "preparing" else 1.0,
        )
        gauge("magpie_healthy", "1 when ok, 0 when degraded or stuck", lambda: float(self._ok()))

        def cache_hits() -> float:
            if not self.registry.default_loaded:
                return 0
            cache = self.registry.default.phrase_cache
            return cache.hits if cache is not None else 0

        gauge("magpie_phrase_cache_hits", "Phrase-cache hits since start", cache_hits)

    def _precision(self) -> str | None:
        if not self.registry.default_loaded:
            return None
        return getattr(self.registry.default, "precision", None)

    def _ok(self) -> bool:
        return self.healthy and not self.problems()
