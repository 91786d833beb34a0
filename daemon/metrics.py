"""Prometheus metrics (prometheus-client), fed from the core's events for every frontend.

The service is the core's monitor: it hears every utterance's events, so the figures
cover MQTT, Wyoming, HTTP and local speech alike, labelled by frontend.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .core.utterance import Event, Utterance

__all__ = ["CONTENT_TYPE", "Metrics"]

FIRST_AUDIO_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.first_audio = Histogram(
            "magpie_first_audio_seconds",
            "Request arrival to first audio (speaker: first frame to ALSA; client: first "
            "chunk handed to the connection)",
            ["frontend"],
            buckets=FIRST_AUDIO_BUCKETS,
            registry=self.registry,
        )
        self.rtf = Histogram(
            "magpie_rtf",
            "Synthesis compute / synthesized audio per finished utterance (cache hits apart)",
            ["frontend"],
            buckets=RTF_BUCKETS,
            registry=self.registry,
        )
        self.utterances = Counter(
            "magpie_utterances",
            "Accepted utterances by outcome",
            ["frontend", "outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "magpie_errors",
            "Refused requests and failed utterances, by kind",
            ["frontend", "kind"],
            registry=self.registry,
        )
        self.engine_failures = Counter(
            "magpie_engine_failures",
            "Synthesis failures of a voice by what followed: retried (on the fallback, from "
            "the unit that failed), failed (the fallback too), set_aside, restored",
            ["voice", "outcome"],
            registry=self.registry,
        )
        self.cached_audio = Counter(
            "magpie_cached_audio_seconds",
            "Audio served from the phrase cache",
            registry=self.registry,
        )

    def failover(self, voice: str, what: str) -> None:
        """A voice's synthesis failed ("retried" on the fallback, "failed": the fallback
        too), or it was set aside / restored (core/failover.py)."""
        self.engine_failures.labels(voice, what).inc()

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A value read at scrape time (queue depth, active streams, xruns, …)."""
        Gauge(name, documentation, registry=self.registry).set_function(read)

    def refused(self, frontend: str, kind: str) -> None:
        self.errors.labels(frontend, kind).inc()

    def observe(self, utterance: Utterance, event: Event) -> None:
        frontend = utterance.ask.frontend
        fields = event.fields
        # (a resume after an alert is not a first start)
        if (
            event.name == "started"
            and fields.get("ttfa_ms") is not None
            and not fields.get("resumed_at_unit")
        ):
            self.first_audio.labels(frontend).observe(fields["ttfa_ms"] / 1000)
        if not event.terminal:
            return
        self.utterances.labels(frontend, event.name).inc()
        if event.name == "error":
            self.errors.labels(frontend, "synthesis").inc()
        if event.name == "finished" and fields.get("rtf") is not None:
            self.rtf.labels(frontend).observe(fields["rtf"])
        if fields.get("cached_s"):
            self.cached_audio.inc(fields["cached_s"])

    def render(self) -> bytes:
        return generate_latest(self.registry)
