"""The frontend-neutral core: each utterance's lifecycle, from acceptance to one outcome.

Frontends (MQTT + Hermes, Wyoming, HTTP) turn their messages into an `Ask` and call
`submit`, `feed_stream` or `stop`; they hear back through the `Sink` they passed. The
core owns the speaker queue, priorities and pre-emption, the synthesis worker and the
player hand-off, and concludes every accepted utterance in one place (`_conclude`),
which emits its one terminal event.

An utterance is spoken on the speaker, or, when the frontend passes an `AudioOut`,
streamed to a client (a Wyoming or HTTP connection): same admission, ids, stop and
events, but it bypasses the speaker queue and runs at once on a client thread, up to
`max_streams` at a time.

Threads and what they own:
- frontend threads (paho's network thread, the Wyoming/HTTP event loops) call
  submit / feed_stream / stop; they never touch an utterance's state directly;
- the speaker worker ("magpie-synth") takes utterances off the queue, synthesizes and
  hands PCM to the player; only it sets `current`, an utterance's cursor and outcome;
- the player thread writes to ALSA and reports the first frame (`_first_frame`);
- one client thread ("magpie-client") per client-bound utterance synthesizes it into
  its AudioOut and concludes it; it owns that utterance's cursor and outcome.
`_lock` guards the queue membership, `current`, the client set and the live-id map. Nothing outside
the core (a sink, the player, the engine) is called while it is held: methods decide
under the lock and act after releasing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from magpie_tts.engine import CLIENT, EngineError, StopToken, SynthesisOptions, TextPolicy

from ..player import Playback
from .queue import RateLimiter, UtteranceQueue
from .stats import RollingStats
from .utterance import (
    PRIORITIES,
    Ask,
    AudioOut,
    Event,
    NullSink,
    Refused,
    Sink,
    Utterance,
)

log = logging.getLogger(__name__)

NOTHING_SPEAKABLE = "nothing speakable in the text (no letters after clean-up)"


class PlayerPort(Protocol):
    def submit(
        self, playback: Playback, pcm: Any, timeout: float | None = None, unit: int | None = None
    ) -> bool: ...
    def finish(self, playback: Playback) -> None: ...
    def cancel(self, playback: Playback | None = None) -> None: ...


class RegistryPort(Protocol):
    def get(self, name: str | None) -> Any: ...  # a StreamingSynthesizer
    def check(self, name: str | None) -> Any: ...  # raises VoiceError for unknown voices


@dataclass(frozen=True)
class CoreLimits:
    max_queue: int = 32
    rate_per_minute: int = 120
    stream_idle_s: float = 30.0
    max_streams: int = 8  # client-bound utterances synthesizing at once


class Core:
    def __init__(
        self,
        registry: RegistryPort,
        player: PlayerPort,
        policy: TextPolicy,
        limits: CoreLimits,
        monitor: Sink | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.player = player
        self.policy = policy
        self.limits = limits
        self.monitor = monitor or NullSink()
        self.clock = clock
        self._on_refused = on_refused
        self.queue = UtteranceQueue(limits.max_queue)
        self.rate = RateLimiter(limits.rate_per_minute, clock)
        self.stats = RollingStats()  # the speaker's utterances
        self.client_stats = RollingStats()  # client-bound utterances (first chunk out)
        self._clients: set[Utterance] = set()
        self.current: Utterance | None = None
        self._playback: Playback | None = None
        self._live: dict[str, Utterance] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.heartbeat = clock()
        self.stall_hook: Callable[[], None] | None = None  # tests: make the worker hang
        self.fail_marker: str | None = None  # tests: text containing it fails in synthesis
        self._worker = threading.Thread(target=self._work, name="magpie-synth", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._worker.start()

    def shutdown(self, timeout: float = 3.0) -> None:
        """Take no more work; stop what plays and conclude everything queued."""
        self._stopping.set()
        self.stop(None, reason="shutdown")
        self.queue.close()
        deadline = time.monotonic() + timeout
        self._worker.join(timeout)
        while self._clients and time.monotonic() < deadline:  # client threads conclude
            time.sleep(0.01)

    @property
    def worker_alive(self) -> bool:
        return self._worker.is_alive()

    @property
    def speaking(self) -> str | None:
        current = self.current
        return current.id if current is not None else None

    # -- frontends call these -----------------------------------------------------------

    @property
    def active_streams(self) -> int:
        return len(self._clients)

    def submit(
        self, ask: Ask, sink: Sink | None = None, audio_out: AudioOut | None = None
    ) -> Utterance:
        """Accept a whole text for the speaker (or for `audio_out`), or raise Refused."""
        utterance = Utterance(ask, sink or NullSink(), audio_out=audio_out)
        try:
            self._check_voice(ask)
            utterance.units = self.policy.units(ask.text)  # the very units spoken later
        except EngineError as exc:
            raise Refused(str(exc), ask.id) from None
        self._admit(utterance)
        return utterance

    def feed_stream(
        self,
        ask: Ask,
        text: str,
        final: bool,
        sink: Sink | None = None,
        audio_out: AudioOut | None = None,
    ) -> Utterance:
        """A piece of incremental text; the first piece of an id opens its utterance
        (for the speaker, or for `audio_out`: later pieces need not repeat it).

        One rule for ids, as for `submit`: an id names a live utterance; once that is
        over, the id may start a new one.
        """
        with self._lock:
            utterance = self._live.get(ask.id)
        if utterance is not None and utterance.stream is None:
            raise Refused(
                f"request id {ask.id!r} is in use by a request that is not a stream", ask.id
            )
        if utterance is None:
            if final and not text.strip():
                raise Refused(f"final for unknown stream {ask.id!r}", ask.id)
            try:
                self._check_voice(ask)
                self.policy.check(text)
            except EngineError as exc:
                raise Refused(str(exc), ask.id) from None
            utterance = Utterance(
                ask, sink or NullSink(), stream=self.policy.stream(self.clock), audio_out=audio_out
            )
            self._admit(utterance)
        stream = utterance.stream
        assert stream is not None
        try:
            if text:
                stream.feed(text)
        except EngineError as exc:
            stream.finish()  # a bad piece ends the stream; what came before is spoken
            raise Refused(str(exc), ask.id) from None
        finally:
            if final:
                stream.finish()
        return utterance

    def stop(self, request_id: str | None, reason: str = "stop requested") -> int:
        """Barge-in: stop the utterance with this id, or everything; how many matched."""
        with self._lock:
            matched = [u for u in self._live.values() if request_id is None or u.id == request_id]
            for utterance in matched:
                utterance.stop_reason = reason  # wins over a pending resume
            queued = self.queue.remove(lambda u: u in matched)
            current = self.current if self.current in matched else None
            playback = self._playback if current is not None else None
        for utterance in queued:
            self._conclude(utterance, "stopped", reason=reason, played=False)
        for utterance in matched:
            self._cancel(utterance, playback if utterance is current else None)
        return len(matched)

    def refused(self, frontend: str, kind: str) -> None:
        """A frontend turned a request away (counted in status and metrics)."""
        self.stats.rejected += 1
        if self._on_refused is not None:
            self._on_refused(frontend, kind)

    def say_local(self, text: str, priority: str = "normal") -> Utterance:
        """Speak text from inside the daemon (audible self-test)."""
        ask = Ask(id=f"local-{time.monotonic_ns()}", text=text, source="local", priority=priority)
        return self.submit(ask)

    # -- admission ----------------------------------------------------------------------

    def _check_voice(self, ask: Ask) -> None:
        synth = self.registry.check(ask.voice)
        if synth is not None:
            synth.voice.speaker_id(ask.speaker)  # an unknown speaker fails now

    def _admit(self, utterance: Utterance) -> None:
        """Queue it (or refuse); `queued` is reported before any later event."""
        if self._stopping.is_set():
            raise Refused("daemon is shutting down", utterance.id)
        to_client = utterance.audio_out is not None
        preempt = playback = None
        with utterance.ordered():
            with self._lock:
                if utterance.id in self._live:
                    raise Refused(f"request id {utterance.id!r} is already queued", utterance.id)
                self.rate.check(utterance.id)
                if to_client:
                    if len(self._clients) >= self.limits.max_streams:
                        raise Refused(
                            f"too many streams at once (limit {self.limits.max_streams})",
                            utterance.id,
                        )
                    self._clients.add(utterance)
                else:
                    self.queue.put(utterance)  # raises Refused when full
                self.rate.take()  # only accepted requests use the budget
                self._live[utterance.id] = utterance
                depth = len(self.queue)
                if not to_client:
                    preempt = self._preemption(utterance)
                    playback = self._playback if preempt is not None else None
            self._report(utterance, "queued", priority=utterance.ask.priority, queue_depth=depth)
        if to_client:
            worker = threading.Thread(
                target=self._serve_client, args=(utterance,), name="magpie-client", daemon=True
            )
            worker.start()
        if preempt is not None:
            log.info("alert %s pre-empts %s", utterance.id, preempt.id)
            self._cancel(preempt, playback)

    def _preemption(self, arriving: Utterance) -> Utterance | None:
        """The current utterance if an alert interrupts it (call with the lock held)."""
        current = self.current
        if arriving.ask.priority != "alert" or current is None:
            return None
        if PRIORITIES[current.ask.priority] <= PRIORITIES["alert"] or current.stop_reason:
            return None
        current.preempted = True
        return current

    def _cancel(self, utterance: Utterance, playback: Playback | None) -> None:
        utterance.stop.stop()
        if utterance.stream is not None:
            utterance.stream.wake()
        if playback is not None:
            self.player.cancel(playback)

    # -- the speaker worker -------------------------------------------------------------

    def _work(self) -> None:
        while True:
            self.heartbeat = self.clock()
            if self.stall_hook is not None:
                self.stall_hook()
            self._reap_idle_streams()
            utterance = self.queue.get(timeout=0.5)
            if utterance is None:
                if self._stopping.is_set():
                    return
                continue
            with self._lock:
                self.current = utterance  # from here on a stop finds it playing
            try:
                self._guarded(self._speak, utterance)
            finally:
                with self._lock:
                    self.current = None
                    self._playback = None

    def _reap_idle_streams(self) -> None:
        """A stream whose sender went quiet while it waited is concluded without ever
        holding the speaker."""
        limit = self.limits.stream_idle_s

        def idle(u: Utterance) -> bool:
            return u.stream is not None and not u.stream.closed and u.stream.idle_s() > limit

        with self._lock:
            reaped = self.queue.remove(idle)
        for utterance in reaped:
            utterance.stream.finish()  # type: ignore[union-attr]
            self._conclude(
                utterance,
                "error",
                error=f"stream {utterance.id!r} idle for {limit:g} s without final",
            )

    def _speak(self, utterance: Utterance) -> None:
        ask = utterance.ask
        if self.fail_marker and self.fail_marker in ask.text:
            raise RuntimeError("test hook: synthesis failure injected")
        if utterance.stop_reason or utterance.stop.stopped:  # stopped on its way here
            self._conclude(utterance, "stopped", reason=utterance.stop_reason, played=False)
            return
        synth = self.registry.get(ask.voice)
        playback = Playback(
            sample_rate=synth.voice.sample_rate,
            volume=ask.volume,
            on_first_frame=lambda pb: self._first_frame(utterance, pb),
        )
        with self._lock:
            self._playback = playback
            stopped = utterance.stop.stopped  # a stop that came before _playback was set
        if stopped:
            self.player.cancel(playback)
        options = SynthesisOptions(speed=ask.speed, speaker=ask.speaker)
        units = utterance.pending_units(self.limits.stream_idle_s, lambda: utterance.stop.stopped)
        audio_s = compute_s = cached_s = 0.0
        first_cached: bool | None = None  # was the first audio heard a cache hit?
        chunks = synth.stream_clauses(
            units,
            options,
            utterance.stop,
            cache_use="keep" if ask.cacheable else "auto",
            first_index=utterance.cursor,
        )
        for chunk in chunks:
            self.heartbeat = self.clock()
            if chunk.cached:
                cached_s += chunk.duration_s
            else:
                audio_s += chunk.duration_s
                compute_s += chunk.compute_s
            if first_cached is None:
                first_cached = chunk.cached
            if not self.player.submit(playback, chunk.pcm, unit=chunk.clause_index):
                break
        self.player.finish(playback)
        while not playback.finished.wait(1.0):
            self.heartbeat = self.clock()
        self._after_playback(utterance, playback, audio_s, compute_s, cached_s, bool(first_cached))

    def _first_frame(self, utterance: Utterance, playback: Playback) -> None:
        at = playback.first_frame_at or self.clock()
        ttfa_ms = round((at - utterance.ask.received_at) * 1000, 1)
        self._report(utterance, "started", ttfa_ms=ttfa_ms, resumed_at_unit=utterance.cursor)

    def _after_playback(
        self,
        utterance: Utterance,
        playback: Playback,
        audio_s: float,
        compute_s: float,
        cached_s: float,
        first_cached: bool,
    ) -> None:
        ttfa_ms = None
        if playback.first_frame_at is not None:
            ttfa_ms = round((playback.first_frame_at - utterance.ask.received_at) * 1000, 1)
        timing = {
            "ttfa_ms": ttfa_ms,
            "duration_s": round(playback.frames_written / playback.sample_rate, 3),
            "rtf": round(compute_s / audio_s, 4) if audio_s > 0 else None,
            "cached_s": round(cached_s, 3),
        }
        resume = False
        with self._lock:
            if utterance.stop.stopped and not utterance.stop_reason and utterance.preempted:
                # Pre-empted by an alert, and no stop since: resume at the unit that was
                # being heard. Decided under the lock, so a stop either came first (and
                # wins) or finds it back in the queue.
                if playback.unit_playing is not None:
                    utterance.cursor = playback.unit_playing
                utterance.preempted = False
                utterance.stop = StopToken()
                self.queue.put(utterance, force=True)
                resume = True
        if resume:
            self._report(
                utterance,
                "interrupted",
                reason="preempted by alert",
                resume_at_unit=utterance.cursor,
                **timing,
            )
            return
        if utterance.stop.stopped:
            self._conclude(
                utterance,
                "stopped",
                reason=utterance.stop_reason or "stopped",
                frames_after_stop=playback.frames_after_cancel,
                **timing,
            )
            return
        if playback.frames_written == 0 and not utterance.units:
            self._conclude(utterance, "error", error=NOTHING_SPEAKABLE)
            return
        self._finished(utterance, self.stats, timing, first_cached)

    def _finished(
        self, utterance: Utterance, stats: RollingStats, timing: dict[str, Any], cached: bool
    ) -> None:
        """Conclude a finished utterance (speaker or client) and count it."""
        stats.add(timing["ttfa_ms"], timing["rtf"], cached=cached)
        if utterance.stream_timed_out:
            timing["error"] = (
                f"stream {utterance.id!r} ended without final after "
                f"{self.limits.stream_idle_s:g} s idle"
            )
        self._conclude(utterance, "finished", **timing)

    # -- client-bound utterances (one thread each) ---------------------------------------

    def _serve_client(self, utterance: Utterance) -> None:
        self._guarded(self._stream_to_client, utterance)

    def _guarded(self, speak: Callable[[Utterance], None], utterance: Utterance) -> None:
        """Run one utterance; a failure concludes it with an error, never the thread."""
        try:
            speak(utterance)
        except EngineError as exc:
            self._conclude(utterance, "error", error=str(exc))
        except Exception as exc:  # one broken utterance must not end the service
            log.exception("synthesis of %s failed", utterance.id)
            self._conclude(utterance, "error", error=f"internal error: {exc}")

    def _stream_to_client(self, utterance: Utterance) -> None:
        ask, out = utterance.ask, utterance.audio_out
        assert out is not None
        if self.fail_marker and self.fail_marker in ask.text:
            raise RuntimeError("test hook: synthesis failure injected")
        synth = self.registry.get(ask.voice)
        rate = synth.voice.sample_rate
        units = utterance.pending_units(self.limits.stream_idle_s, lambda: utterance.stop.stopped)
        chunks = synth.stream_clauses(
            units,
            SynthesisOptions(speed=ask.speed, speaker=ask.speaker),
            utterance.stop,
            cache_use="keep" if ask.cacheable else "auto",
            priority=CLIENT,  # the local speaker's windows come first (engine/stream/turns.py)
        )
        audio_s = compute_s = cached_s = 0.0
        ttfa_ms: float | None = None
        first_cached = False
        for chunk in chunks:
            pcm = chunk.pcm
            if ask.volume != 1.0:
                pcm = np.clip(pcm * ask.volume, -32768, 32767).astype(np.int16)
            if not out.write(pcm, rate):
                with self._lock:
                    utterance.stop_reason = utterance.stop_reason or "client gone"
                utterance.stop.stop()
                break
            if chunk.cached:
                cached_s += chunk.duration_s
            else:
                audio_s += chunk.duration_s
                compute_s += chunk.compute_s
            if ttfa_ms is None:  # the first chunk is out of the daemon
                ttfa_ms = round((self.clock() - ask.received_at) * 1000, 1)
                first_cached = chunk.cached
                self._report(utterance, "started", ttfa_ms=ttfa_ms)
        timing = {
            "ttfa_ms": ttfa_ms,
            "duration_s": round(audio_s + cached_s, 3),
            "rtf": round(compute_s / audio_s, 4) if audio_s > 0 else None,
            "cached_s": round(cached_s, 3),
        }
        if utterance.stop.stopped:
            self._conclude(
                utterance, "stopped", reason=utterance.stop_reason or "stopped", **timing
            )
        elif ttfa_ms is None:
            self._conclude(utterance, "error", error=NOTHING_SPEAKABLE)
        else:
            self._finished(utterance, self.client_stats, timing, first_cached)

    # -- the one place an utterance ends ------------------------------------------------

    def _conclude(self, utterance: Utterance, outcome: str, **fields: Any) -> None:
        with self._lock:
            if self._live.get(utterance.id) is utterance:
                del self._live[utterance.id]
            self._clients.discard(utterance)
        if utterance.stream is not None:
            utterance.stream.finish()
        stats = self.client_stats if utterance.audio_out is not None else self.stats
        if outcome == "stopped":
            stats.stopped += 1
        elif outcome == "error":
            stats.errors += 1
        self._report(utterance, outcome, **fields)

    def _report(self, utterance: Utterance, name: str, **fields: Any) -> None:
        event = Event(name, fields)
        try:
            if utterance.report(event):
                self.monitor.report(utterance, event)
        except Exception:  # a frontend's failure must not break the lifecycle
            log.exception("reporting %s of %s failed", name, utterance.id)
