"""The daemon: MQTT requests → priority queue → engine → player, with events and status."""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from magpie_tts.engine import EngineError, SynthesisOptions, TextError

from . import requests as rq
from .config import Config
from .mqtt import MqttLink, Topics
from .player import Playback, Player
from .queue import RateLimiter, RequestQueue
from .requests import PayloadError, Request
from .stats import RollingStats
from .voices import VoiceRegistry

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class Service:
    def __init__(self, config: Config, registry: VoiceRegistry | None = None) -> None:
        self.config = config
        self.topics = Topics(config.mqtt.base_topic)
        self.registry = registry or VoiceRegistry(config)
        self.player = Player(config.audio, self._audio_error, self._audio_ok)
        self.queue = RequestQueue(config.limits.max_queue)
        self.rate = RateLimiter(config.limits.rate_per_minute)
        self.stats = RollingStats()
        self.selftest: dict[str, Any] | None = None
        self.degraded: str | None = None
        self.current: Request | None = None
        self._current_playback: Playback | None = None
        self._streams: dict[str, Request] = {}
        self._ended_ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._recent_messages: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self.worker_heartbeat = time.monotonic()
        self.stale_s = 10.0
        self.stall_hook: Callable[[], None] | None = None  # tests: make the worker hang
        self.fail_marker: str | None = None  # tests: text containing it fails in synthesis
        self._worker = threading.Thread(target=self._work, name="magpie-synth", daemon=True)
        self.mqtt = MqttLink(
            config.mqtt,
            self.topics,
            self._on_message,
            self.publish_status,
            {"state": "offline", "version": VERSION},
        )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.player.start()
        self._worker.start()
        self.mqtt.start()

    def shutdown(self, drain_s: float = 0.0) -> None:
        """Stop taking work; optionally let the current utterance finish, then stop."""
        self._stopping.set()
        deadline = time.monotonic() + drain_s
        while self.current is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop_speech(None, reason="shutdown")
        self.queue.close()
        self._worker.join(3)
        self.player.close()
        self.mqtt.stop({"state": "offline", "version": VERSION})

    @property
    def healthy(self) -> bool:
        """False when the synth or player thread is stuck (drives the systemd watchdog)."""
        now = time.monotonic()
        stale = self.stale_s
        worker_ok = self._worker.is_alive() and now - self.worker_heartbeat < stale
        player_ok = self.player.idle or now - self.player.heartbeat < stale
        return worker_ok and player_ok

    # -- publishing -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        synth = self.registry.default
        status: dict[str, Any] = {
            "state": "online",
            "version": VERSION,
            "pid": os.getpid(),
            "health": "degraded" if self.degraded else "ok",
            "voice": synth.voice.name,
            "model_hash": synth.voice.model_hash,
            "provider": synth.choice.used,
            "provider_requested": synth.choice.requested,
            "precision": synth.precision,
            "queue_depth": len(self.queue),
            "speaking": self.current.id if self.current else None,
            "xruns": self.player.output.xruns,
            "audio": self.player.device_error or "ok",
            "mqtt_reconnects": max(0, self.mqtt.connects - 1),
            **self.stats.summary(),
        }
        if synth.phrase_cache is not None:
            status["phrase_cache"] = {
                "hits": synth.phrase_cache.hits,
                "misses": synth.phrase_cache.misses,
            }
        if self.degraded:
            status["degraded"] = self.degraded
        if synth.choice.warning:
            status["provider_warning"] = synth.choice.warning
        if self.selftest is not None:
            status["selftest"] = self.selftest
        return status

    def publish_status(self) -> None:
        self.mqtt.publish(self.topics.status, self.status(), retain=True)

    def event(self, request: Request, name: str, **fields: Any) -> None:
        self.mqtt.publish(
            self.topics.events,
            {"id": request.id, "event": name, "source": request.source, **fields},
        )

    def reject(
        self,
        reason: str,
        topic: str,
        request_id: str | None = None,
        hermes: dict[str, Any] | None = None,
    ) -> None:
        """One clear error per rejected input: error topic, journal, Hermes if it came so."""
        self.stats.errors += 1
        log.warning("rejected message on %s (id=%s): %s", topic, request_id, reason)
        self.mqtt.publish(self.topics.error, {"id": request_id, "topic": topic, "error": reason})
        if hermes is not None:
            self.mqtt.publish(
                self.topics.hermes_error,
                {
                    "error": reason,
                    "siteId": hermes.get("siteId", self.config.mqtt.site_id),
                    "sessionId": hermes.get("sessionId"),
                    "context": topic,
                },
            )

    def _audio_error(self, message: str) -> None:
        self.mqtt.publish(self.topics.error, {"id": None, "topic": "audio", "error": message})
        self.publish_status()

    def _audio_ok(self) -> None:
        self.publish_status()

    # -- incoming messages (paho's thread) --------------------------------------------------

    def _on_message(self, topic: str, payload: bytes, arrived: float, dup: bool = False) -> None:
        # QoS 1 is at-least-once: after a reconnect the broker resends what we may already
        # have taken (DUP flag). Speak each message once.
        digest = hashlib.blake2b(topic.encode() + b"\0" + payload, digest_size=16).digest()
        with self._lock:
            if dup and digest in self._recent_messages:
                log.info("dropping redelivered duplicate on %s", topic)
                return
            self._recent_messages[digest] = None
            while len(self._recent_messages) > 2000:
                self._recent_messages.popitem(last=False)
        limit = self.config.limits.max_text_bytes
        hermes = rq.hermes_context(payload) if topic == self.topics.hermes_say else None
        try:
            if topic == self.topics.say:
                self._accept(rq.parse_say(payload, limit), arrived)
            elif topic == self.topics.stream:
                self._on_stream_piece(rq.parse_stream(payload, limit), arrived)
            elif topic == self.topics.stop:
                self.stop_speech(rq.parse_stop(payload, limit), reason="stop requested")
            elif topic == self.topics.hermes_say:
                request = rq.parse_hermes(payload, limit)
                if request.site_id != self.config.mqtt.site_id:
                    log.debug("hermes say for site %s ignored", request.site_id)
                    return
                self._accept(request, arrived)
        except PayloadError as exc:
            self.reject(str(exc), topic, exc.request_id, hermes)
        except EngineError as exc:
            self.reject(str(exc), topic, None, hermes)

    def _admit(self, request: Request, arrived: float) -> None:
        if self._stopping.is_set():
            raise PayloadError("daemon is shutting down", request.id)
        with self._lock:
            # An id may come back once its utterance is over ("doorbell" every day), but
            # two live requests with one id would make events and stop-by-id ambiguous.
            if self.queue.find(request.id) or (
                self.current is not None and self.current.id == request.id
            ):
                raise PayloadError(f"request id {request.id!r} is already queued", request.id)
        self.rate.check(request.id)
        request.received_at = arrived

    def _accept(self, request: Request, arrived: float) -> None:
        self._admit(request, arrived)
        try:
            synth = self.registry.check(request.voice)
            if synth is not None:
                synth.voice.speaker_id(request.speaker)  # unknown speaker fails now
            # bad text fails now, not later; the worker speaks these very units
            request.units = self.registry.default.clauses(request.text)
        except EngineError as exc:
            raise PayloadError(str(exc), request.id) from None
        self._enqueue(request)

    def say(self, text: str, priority: str = "normal") -> Request:
        """Queue text from inside the daemon (audible self-test)."""
        request = Request(
            id=f"local-{time.monotonic_ns()}", text=text, source="local", priority=priority
        )
        self._enqueue(request)
        return request

    def _enqueue(self, request: Request) -> None:
        self.queue.put(request)
        self.event(request, "queued", priority=request.priority, queue_depth=len(self.queue))
        self._maybe_preempt(request)

    def _maybe_preempt(self, request: Request) -> None:
        """An alert interrupts lower-priority speech; the interrupted text is spoken after."""
        current = self.current
        if request.priority != "alert" or current is None:
            return
        if rq.PRIORITIES[current.priority] <= rq.PRIORITIES["alert"]:
            return
        log.info("alert %s pre-empts %s", request.id, current.id)
        current.preempted = True
        self._cancel(current)

    def _on_stream_piece(self, piece: rq.StreamPiece, arrived: float) -> None:
        with self._lock:
            request = self._streams.get(piece.id)
            if request is None:
                if piece.id in self._ended_ids:
                    raise PayloadError(f"stream {piece.id!r} already finished", piece.id)
                if piece.final and not piece.text.strip():
                    raise PayloadError(f"final for unknown stream {piece.id!r}", piece.id)
                request = rq.stream_request(piece)
                self._admit(request, arrived)
                try:
                    self.registry.check(request.voice)
                except EngineError as exc:
                    raise PayloadError(str(exc), request.id) from None
                request.stream = self.registry.default.text_stream()
                self._streams[piece.id] = request
                self._enqueue(request)
            assert request.stream is not None
            try:
                if piece.text:
                    request.stream.feed(piece.text)
                if piece.final:
                    request.stream.finish()
            except TextError as exc:
                request.stream.finish()
                raise PayloadError(str(exc), piece.id) from None
            finally:
                if piece.final:
                    self._retire(piece.id)

    def _retire(self, request_id: str) -> None:
        """The request is over: no more stream pieces for it; its id counts as ended."""
        with self._lock:
            self._streams.pop(request_id, None)
            self._ended_ids[request_id] = None
            while len(self._ended_ids) > 1000:
                self._ended_ids.popitem(last=False)

    # -- stopping -----------------------------------------------------------------------

    def _cancel(self, request: Request) -> None:
        request.stop.stop()
        if request.stream is not None:
            request.stream.finish()
        with self._lock:
            playback = self._current_playback if self.current is request else None
        if playback is not None:
            self.player.cancel(playback)

    def stop_speech(self, request_id: str | None, reason: str) -> None:
        """Barge-in: stop the current utterance (or the one with this id), clear queued."""
        for request in self.queue.remove(request_id):
            self.stats.stopped += 1
            self._finish_stream(request)
            self.event(request, "stopped", reason=reason, played=False)
            self._hermes_finished(request)
        current = self.current
        if current is not None and (request_id is None or current.id == request_id):
            current.stop_reason = reason
            self._cancel(current)

    def _finish_stream(self, request: Request) -> None:
        if request.stream is not None:
            request.stream.finish()
            self._retire(request.id)

    # -- the synthesis worker ---------------------------------------------------------------

    def _work(self) -> None:
        while True:
            self.worker_heartbeat = time.monotonic()
            if self.stall_hook is not None:
                self.stall_hook()
            request = self.queue.get(timeout=1.0)
            if request is None:
                if self._stopping.is_set():
                    return
                continue
            with self._lock:
                self.current = request  # from here on a stop finds it
            try:
                self._speak(request)
            except EngineError as exc:
                self._fail(request, str(exc))
            except Exception as exc:  # one broken utterance must not end the service
                log.exception("synthesis of %s failed", request.id)
                self._fail(request, f"internal error: {exc}")
            finally:
                with self._lock:
                    self.current = None
                    self._current_playback = None
            self.publish_status()

    def _fail(self, request: Request, reason: str) -> None:
        hermes = {"siteId": request.site_id, "sessionId": request.session_id}
        topic = {
            "say": self.topics.say,
            "stream": self.topics.stream,
            "hermes": self.topics.hermes_say,
        }.get(request.source, request.source)
        self.reject(reason, topic, request.id, hermes if request.source == "hermes" else None)
        self.event(request, "error", error=reason)
        self._finish_stream(request)
        self._hermes_finished(request)

    def _clauses(self, request: Request) -> Iterator[str]:
        stream = request.stream
        if stream is None:
            yield from request.units or self.registry.default.clauses(request.text)
            return
        idle = self.config.limits.stream_idle_s
        yield from stream.clauses(timeout=idle)
        if not stream.closed:  # no piece for `idle` seconds and no final: speak the rest
            stream.finish()
            yield from stream.clauses(timeout=0)
            request.stream_timed_out = True

    def _speak(self, request: Request) -> None:
        if self.fail_marker and self.fail_marker in request.text:
            raise RuntimeError("test hook: synthesis failure injected")
        synth = self.registry.get(request.voice)
        playback = Playback(
            sample_rate=synth.voice.sample_rate,
            volume=request.volume,
            on_first_frame=lambda pb: self._first_frame(request, pb),
        )
        with self._lock:
            self._current_playback = playback
        if request.stop.stopped:  # stopped between leaving the queue and starting
            self.player.finish(playback)
            playback.finished.wait(5)
            self._report(request, playback, 0.0, 0.0)
            return
        started = time.monotonic()
        options = SynthesisOptions(speed=request.speed, speaker=request.speaker)
        audio_s = 0.0
        for chunk in synth.stream_clauses(self._clauses(request), options, request.stop):
            self.worker_heartbeat = time.monotonic()
            audio_s += chunk.duration_s
            if not self.player.submit(playback, chunk.pcm):
                break
        synth_s = time.monotonic() - started
        self.player.finish(playback)
        while not playback.finished.wait(1.0):
            self.worker_heartbeat = time.monotonic()
        self._report(request, playback, audio_s, synth_s)

    def _first_frame(self, request: Request, playback: Playback) -> None:
        ttfa_ms = ((playback.first_frame_at or time.monotonic()) - request.received_at) * 1000
        self.event(request, "started", ttfa_ms=round(ttfa_ms, 1))

    def _report(self, request: Request, playback: Playback, audio_s: float, synth_s: float) -> None:
        ttfa_ms = None
        if playback.first_frame_at is not None:
            ttfa_ms = round((playback.first_frame_at - request.received_at) * 1000, 1)
        rtf = round(synth_s / audio_s, 4) if audio_s > 0 else None
        timing = {
            "ttfa_ms": ttfa_ms,
            "duration_s": round(playback.frames_written / playback.sample_rate, 3),
            "rtf": rtf,
        }
        self._retire(request.id)
        if request.stop.stopped:
            self.stats.stopped += 1
            if request.preempted and request.stream is None:
                self.event(request, "stopped", reason="preempted by alert", **timing)
                self._requeue(request)
                return
            self.event(
                request,
                "stopped",
                reason=request.stop_reason or "stopped",
                frames_after_stop=playback.frames_after_cancel,
                **timing,
            )
        else:
            self.stats.add(ttfa_ms, rtf)
            self.event(request, "finished", **timing)
            if request.stream_timed_out:
                self.reject(
                    f"stream {request.id!r} ended without final after "
                    f"{self.config.limits.stream_idle_s:g} s idle",
                    self.topics.stream,
                    request.id,
                )
        self._hermes_finished(request)

    def _requeue(self, request: Request) -> None:
        again = Request(
            speaker=request.speaker,
            id=request.id,
            text=request.text,
            units=request.units,
            source=request.source,
            voice=request.voice,
            speed=request.speed,
            volume=request.volume,
            priority=request.priority,
            site_id=request.site_id,
            session_id=request.session_id,
            received_at=time.monotonic(),
        )
        with self._lock:
            self._ended_ids.pop(request.id, None)
        self.queue.put(again, force=True)
        self.event(again, "queued", priority=again.priority, queue_depth=len(self.queue))

    def _hermes_finished(self, request: Request) -> None:
        if request.source == "hermes":
            self.mqtt.publish(
                self.topics.hermes_finished,
                {
                    "id": request.id,
                    "siteId": request.site_id,
                    "sessionId": request.session_id,
                },
            )
