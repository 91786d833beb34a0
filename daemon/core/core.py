"""The frontend-neutral core: each utterance's lifecycle, from acceptance to one outcome.

Frontends (MQTT + Hermes, Wyoming, HTTP) turn their messages into an `Ask` and call
`submit`, `feed_stream`, `stop` or `cancel`; they hear back through the `Sink` they
passed. The core owns admission (ids, rate, queue, stream slots), priorities and
pre-emption, stop, and concludes every accepted utterance in one place (`conclude`),
which emits its one terminal event.

An utterance is spoken on the speaker (the worker in speaker.py), or, when the frontend
passes an `AudioOut`, streamed to a client (a Wyoming or HTTP connection): same
admission, ids and events, but it bypasses the speaker queue and runs at once on a
client thread (client.py), holding a synthesis slot while it makes audio (slots.py).

Who may end what: `stop` (a stop-all, or a stop by id, from MQTT or HTTP) reaches only
the speaker's utterances; a client-bound utterance is its connection's alone, ended by
`cancel` from the frontend that holds it (the client left or sent a bad piece), or by
shutdown. Ids live in one namespace per frontend, and those the daemon makes are random
(`new_id`): no client can guess, squat on or stop another's request.

Threads and what they own:
- frontend threads (paho's network thread, the Wyoming/HTTP event loops) call
  submit / feed_stream / stop; they never touch an utterance's state directly;
- the speaker worker ("magpie-synth", speaker.py) takes utterances off the queue,
  synthesizes and hands PCM to the player; only it sets `speaker.current`, and an
  utterance's cursor and outcome while it speaks;
- the player thread writes to ALSA and reports the first frame;
- one client thread ("magpie-client") per client-bound utterance synthesizes it into
  its AudioOut and concludes it; it owns that utterance's cursor and outcome.
`lock` guards the queue membership, the speaker's current utterance and playback and
the live-id map (the slots have a lock of their own, taken after it). Nothing outside
the core (a sink, the player, the engine) is called while it is held: methods decide
under the lock and act after releasing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from magpie_tts.engine import EngineError, TextPolicy, VoiceError, parse_custom, unknown_symbols

from ..player import Playback
from .capacity import Capacity
from .client import stream_to_client
from .queue import UtteranceQueue
from .rate import RateLimit
from .slots import StreamSlots
from .speaker import NOTHING_SPEAKABLE, Speaker
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
    new_id,
    shown_id,
)

log = logging.getLogger(__name__)

__all__ = ["NOTHING_SPEAKABLE", "Core", "CoreLimits"]


class PlayerPort(Protocol):
    def submit(
        self, playback: Playback, pcm: Any, timeout: float | None = None, unit: int | None = None
    ) -> bool: ...
    def finish(self, playback: Playback) -> None: ...
    def cancel(self, playback: Playback | None = None) -> None: ...


class RegistryPort(Protocol):
    def get(self, name: str | None) -> Any: ...  # a StreamingSynthesizer
    def check(self, name: str | None) -> Any: ...  # raises VoiceError for unknown voices

    failover: Any  # failover.Failover: what synthesis retries on, and each voice's health


@dataclass(frozen=True)
class CoreLimits:
    max_queue: int = 32
    rate_per_minute: int = 120  # accepted requests per frontend
    stream_idle_s: float = 30.0
    max_streams: int | None = 8  # client-bound utterances synthesizing at once; None:
    # the capacity measured from the voice's speed (capacity.py)
    max_waiting_streams: int = 16  # client-bound streams waiting for text, per frontend
    first_audio_budget_ms: float = 0.0  # shed what would miss it (capacity.py); 0: never
    earcon_after_s: float | None = None  # the speaker's earcon (earcon.py); None: off


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
        self.rate = RateLimit(limits.rate_per_minute, clock)  # keyed by frontend
        self.stats = RollingStats()  # the speaker's utterances
        self.client_stats = RollingStats()  # client-bound utterances (first chunk out)
        self.capacity = Capacity(limits.max_streams, limits.first_audio_budget_ms)
        self.slots = StreamSlots(self.capacity, limits.max_waiting_streams)
        self._live: dict[tuple[str, str], Utterance] = {}  # by Ask.key
        self.lock = threading.Lock()
        self._stopping = threading.Event()
        self.fail_marker: str | None = None  # tests: text containing it fails in synthesis
        self.speaker = Speaker(self)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.speaker.start()

    def shutdown(self, timeout: float = 3.0) -> None:
        """Take no more work; stop what plays and conclude everything queued."""
        self._stopping.set()
        with self.lock:
            everything = list(self._live.values())  # client-bound utterances too
        self._halt(everything, "shutdown")
        self.queue.close()
        deadline = time.monotonic() + timeout
        self.speaker.join(timeout)
        while self.slots and time.monotonic() < deadline:  # client threads conclude
            time.sleep(0.01)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def worker_alive(self) -> bool:
        return self.speaker.alive

    @property
    def heartbeat(self) -> float:
        return self.speaker.heartbeat

    @property
    def speaking(self) -> str | None:
        current = self.speaker.current
        return current.id if current is not None else None

    @property
    def active_streams(self) -> int:
        return len(self.slots)

    # -- frontends call these -----------------------------------------------------------

    def submit(
        self, ask: Ask, sink: Sink | None = None, audio_out: AudioOut | None = None
    ) -> Utterance:
        """Accept a whole text for the speaker (or for `audio_out`), or raise Refused."""
        utterance = Utterance(ask, sink or NullSink(), audio_out=audio_out)
        try:
            self._check_voice(ask)
            # the very units spoken later
            utterance.units = self.policy.units(ask.text, ask.custom_dictionary)
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
        with self.lock:
            utterance = self._live.get(ask.key)
        if utterance is not None and utterance.stream is None:
            raise Refused(
                f"request id {ask.id!r} is in use by a request that is not a stream",
                ask.id,
                code="duplicate-id",
            )
        if utterance is None:
            if final and not text.strip():
                raise Refused(f"final for unknown stream {ask.id!r}", ask.id, code="refused")
            try:
                self._check_voice(ask)
                self.policy.check(text)
            except EngineError as exc:
                raise Refused(str(exc), ask.id) from None
            utterance = Utterance(
                ask,
                sink or NullSink(),
                stream=self.policy.stream(self.clock, ask.custom_dictionary),
                audio_out=audio_out,
            )
            self._admit(utterance)
        try:
            self.feed(utterance, text, final)
        except Refused:
            assert utterance.stream is not None
            utterance.stream.finish()  # a bad piece ends the stream; what came before is spoken
            raise
        return utterance

    def feed(self, utterance: Utterance, text: str, final: bool) -> None:
        """The next piece of a stream its frontend holds (it never opens another). A piece
        that cannot be spoken is refused and leaves the stream as it was, for the caller
        to end (`cancel`) or finish."""
        stream = utterance.stream
        if stream is None or stream.closed:
            raise Refused(f"stream {utterance.id!r} has ended", utterance.id, code="refused")
        try:
            if text:
                stream.feed(text)
        except EngineError as exc:
            raise Refused(str(exc), utterance.id) from None
        if final:
            stream.finish()

    def stop(
        self, frontend: str, request_id: str | None = None, reason: str = "stop requested"
    ) -> int:
        """Barge-in on the speaker: everything queued or playing, or the utterance with
        this id in `frontend`'s namespace; how many matched. Client-bound streams are
        never reached: they are their connections' (see `cancel`)."""
        with self.lock:
            matched = [
                u
                for u in self._live.values()
                if u.audio_out is None
                and (request_id is None or u.ask.key == (frontend, request_id))
            ]
        return self._halt(matched, reason)

    def cancel(self, utterance: Utterance, reason: str) -> None:
        """The frontend that holds this utterance ends it (its client left, or sent a
        piece that cannot be spoken)."""
        self._halt([utterance], reason)

    def _halt(self, utterances: list[Utterance], reason: str) -> int:
        with self.lock:
            matched = [u for u in utterances if self._live.get(u.ask.key) is u]
            for utterance in matched:
                utterance.stop_reason = reason  # wins over a pending resume
            queued = self.queue.remove(lambda u: u in matched)
            current = self.speaker.current if self.speaker.current in matched else None
            playback = self.speaker.playback if current is not None else None
        for utterance in queued:
            self.conclude(utterance, "stopped", reason=reason, played=False)
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
        ask = Ask(id=new_id("local"), text=text, source="local", priority=priority)
        return self.submit(ask)

    # -- admission ----------------------------------------------------------------------

    def _check_voice(self, ask: Ask) -> None:
        synth = self.registry.check(ask.voice)
        if synth is not None:
            synth.voice.speaker_id(ask.speaker)  # an unknown speaker fails now
            if ask.custom_dictionary:  # a phoneme the voice cannot say fails now, named
                unknown_symbols(parse_custom(ask.custom_dictionary), synth.voice.phoneme_id_map)

    def _admit(self, utterance: Utterance) -> None:
        """Queue it (or refuse); `queued` is reported before any later event."""
        if self._stopping.is_set():
            raise Refused("daemon is shutting down", utterance.id, code="shutting-down")
        to_client = utterance.audio_out is not None
        preempt = playback = None
        key = utterance.ask.key
        with utterance.ordered():
            with self.lock:
                if key in self._live:
                    raise Refused(
                        f"request id {utterance.id!r} is already queued",
                        utterance.id,
                        code="duplicate-id",
                    )
                wait = self.rate.retry_after(utterance.ask.frontend)  # a budget per frontend
                if wait > 0:
                    raise Refused(
                        f"rate limit: more than {self.rate.per_minute} requests per minute",
                        utterance.id,
                        retry_after=wait,
                        code="busy",
                    )
                speaker_busy = self.speaker.current is not None
                if to_client:
                    self.slots.admit(utterance, speaker_busy)  # Refused: none free, or shed
                else:
                    self.slots.shed(utterance, True, self.slots.load(speaker_busy))
                    self.queue.put(utterance)  # raises Refused when full
                self.rate.take(utterance.ask.frontend)  # only accepted requests use it
                self._live[key] = utterance
                depth = len(self.queue)
                if not to_client:
                    preempt = self._preemption(utterance)
                    playback = self.speaker.playback if preempt is not None else None
            notes = getattr(utterance.units, "notes", ())  # SSML asked for, without effect
            extra = {"notes": list(notes)} if notes else {}
            self.report(
                utterance, "queued", priority=utterance.ask.priority, queue_depth=depth, **extra
            )
        if to_client:
            worker = threading.Thread(
                target=self.guarded,
                args=(partial(stream_to_client, self), utterance),
                name="magpie-client",
                daemon=True,
            )
            worker.start()
        if preempt is not None:
            log.info("alert %s pre-empts %s", shown_id(utterance.id), shown_id(preempt.id))
            self._cancel(preempt, playback)

    def _preemption(self, arriving: Utterance) -> Utterance | None:
        """The current utterance if an alert interrupts it (call with the lock held)."""
        current = self.speaker.current
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
        if utterance.audio_out is not None:
            self.slots.wake()  # it may be waiting for a slot
        if playback is not None:
            self.player.cancel(playback)

    # -- running one utterance (the speaker worker or a client thread) --------------------

    def guarded(self, speak: Callable[[Utterance], None], utterance: Utterance) -> None:
        """Run one utterance; a failure concludes it with an error, never the thread."""
        try:
            speak(utterance)
        except VoiceError as exc:  # its voice did not load: answered as at admission
            self.conclude(utterance, "error", error=str(exc), code="unknown-voice")
        except EngineError as exc:
            self.conclude(utterance, "error", error=str(exc))
        except Exception as exc:  # one broken utterance must not end the service
            log.exception("synthesis of %s failed", shown_id(utterance.id))
            self.conclude(utterance, "error", error=f"internal error: {exc}")

    def check_fail_marker(self, ask: Ask) -> None:
        if self.fail_marker and self.fail_marker in ask.text:
            raise RuntimeError("test hook: synthesis failure injected")

    # -- the one place an utterance ends ------------------------------------------------

    def finished(
        self, utterance: Utterance, stats: RollingStats, timing: dict[str, Any], cached: bool
    ) -> None:
        """Conclude a finished utterance (speaker or client) and count it."""
        stats.add(timing["ttfa_ms"], timing["rtf"], cached=cached)
        if utterance.stream_timed_out:
            timing["error"] = (
                f"stream {utterance.id!r} ended without final after "
                f"{self.limits.stream_idle_s:g} s idle"
            )
        self.conclude(utterance, "finished", **timing)

    def conclude(self, utterance: Utterance, outcome: str, **fields: Any) -> None:
        with self.lock:
            if self._live.get(utterance.ask.key) is utterance:
                del self._live[utterance.ask.key]
        if utterance.audio_out is not None:
            self.slots.close(utterance)
        if utterance.stream is not None:
            utterance.stream.finish()
        stats = self.client_stats if utterance.audio_out is not None else self.stats
        if outcome == "stopped":
            stats.stopped += 1
        elif outcome == "error":
            stats.errors += 1
        self.report(utterance, outcome, **fields)

    def report(self, utterance: Utterance, name: str, **fields: Any) -> None:
        event = Event(name, fields)
        try:
            if utterance.report(event):
                self.monitor.report(utterance, event)
        except Exception:  # a frontend's failure must not break the lifecycle
            log.exception("reporting %s of %s failed", name, shown_id(utterance.id))
