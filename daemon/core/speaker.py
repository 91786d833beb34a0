"""The speaker worker: the one thread ("magpie-synth") that speaks queued utterances.

It takes them off the core's queue in priority order, streams the engine's chunks into
the player and concludes each through the core. An alert pre-empts what plays; the
pre-empted utterance goes back to the queue and resumes at the unit that was being
heard. Only this thread sets `current`, and an utterance's cursor while it speaks.
With `audio.earcon` an utterance that cannot start within `audio.earcon_after_ms` of
being taken, or that fails, is announced by a short tone (earcon.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magpie_tts.engine import StopToken, SynthesisOptions

from ..player import Playback
from . import earcon
from .stats import Tally
from .utterance import Utterance
from .wordclock import WordClock

if TYPE_CHECKING:
    from .core import Core

log = logging.getLogger(__name__)

NOTHING_SPEAKABLE = "nothing speakable in the text (no letters after clean-up)"


class Speaker:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.current: Utterance | None = None  # set under the core's lock
        self.playback: Playback | None = None
        self.heartbeat = core.clock()
        self.stall_hook: Callable[[], None] | None = None  # tests: make the worker hang
        self._thread = threading.Thread(target=self._work, name="magpie-synth", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _work(self) -> None:
        core = self.core
        while True:
            self.heartbeat = core.clock()
            if self.stall_hook is not None:
                self.stall_hook()
            self._reap_idle_streams()
            utterance = core.queue.get(timeout=0.5)
            if utterance is None:
                if core.stopping:
                    return
                continue
            with core.lock:
                self.current = utterance  # from here on a stop finds it playing
            try:
                core.guarded(self._speak, utterance)
                self._failed_earcon(utterance)
            finally:
                with core.lock:
                    self.current = None
                    self.playback = None

    def _failed_earcon(self, utterance: Utterance) -> None:
        """An utterance that failed: the falling earcon, so the person hears it went
        wrong (at the default voice's rate: the failed voice may have none)."""
        outcome = utterance.outcome
        if self.core.limits.earcon_after_s is None or outcome is None or outcome.name != "error":
            return
        try:
            rate = self.core.registry.get(None).voice.sample_rate
        except Exception:  # no voice to take the rate from: nothing to play it at
            return
        earcon.play(self.core.player, rate, "failed")

    def _reap_idle_streams(self) -> None:
        """A stream whose sender went quiet while it waited is concluded without ever
        holding the speaker."""
        core = self.core
        limit = core.limits.stream_idle_s

        def idle(u: Utterance) -> bool:
            return u.stream is not None and not u.stream.closed and u.stream.idle_s() > limit

        with core.lock:
            reaped = core.queue.remove(idle)
        for utterance in reaped:
            utterance.stream.finish()  # type: ignore[union-attr]
            core.conclude(
                utterance,
                "error",
                error=f"stream {utterance.id!r} idle for {limit:g} s without final",
            )

    def _speak(self, utterance: Utterance) -> None:
        core, ask = self.core, utterance.ask
        core.check_fail_marker(ask)
        if utterance.stop_reason or utterance.stop.stopped:  # stopped on its way here
            core.conclude(utterance, "stopped", reason=utterance.stop_reason, played=False)
            return
        synth = core.registry.get(ask.voice)
        playback = Playback(
            sample_rate=synth.voice.sample_rate,
            volume=ask.volume,
            on_first_frame=lambda pb: self._first_frame(utterance, pb),
        )
        with core.lock:
            self.playback = playback
            stopped = utterance.stop.stopped  # a stop that came before playback was set
        if stopped:
            core.player.cancel(playback)
        units = utterance.pending_units(core.limits.stream_idle_s, lambda: utterance.stop.stopped)
        tally = Tally()
        after_s = core.limits.earcon_after_s
        watch = None
        if after_s is not None:
            watch = earcon.EarconTimer(core.player, playback.sample_rate, after_s)
        clock = WordClock(core, utterance, playback) if ask.marks else None
        try:
            self._play(utterance, synth, playback, units, tally, watch, clock)
        finally:
            if watch is not None:
                watch.first_audio()
            if clock is not None:
                clock.close()
        core.player.finish(playback)
        while not playback.finished.wait(1.0):
            self.heartbeat = core.clock()
        if clock is not None:
            clock.drain()  # every word event before the outcome
        self._after_playback(utterance, playback, tally)

    def _play(
        self,
        utterance: Utterance,
        synth: Any,
        playback: Playback,
        units: Any,
        tally: Tally,
        watch: earcon.EarconTimer | None,
        clock: WordClock | None,
    ) -> None:
        core, ask = self.core, utterance.ask
        options = SynthesisOptions(speed=ask.speed, speaker=ask.speaker)
        chunks = core.registry.failover.stream(
            synth,
            units,
            options,
            utterance.stop,
            cache_use="keep" if ask.cacheable else "auto",
            first_index=utterance.cursor,
        )
        for chunk in chunks:
            self.heartbeat = core.clock()
            tally.add(chunk)
            if watch is not None:
                watch.first_audio()  # after an earcon already queued, or instead of one
            if clock is not None and chunk.words:
                clock.add(chunk.words)
            if not core.player.submit(playback, chunk.pcm, unit=chunk.clause_index):
                break

    def _first_frame(self, utterance: Utterance, playback: Playback) -> None:
        at = playback.first_frame_at or self.core.clock()
        ttfa_ms = round((at - utterance.ask.received_at) * 1000, 1)
        self.core.report(utterance, "started", ttfa_ms=ttfa_ms, resumed_at_unit=utterance.cursor)

    def _after_playback(self, utterance: Utterance, playback: Playback, tally: Tally) -> None:
        core = self.core
        ttfa_ms = None
        if playback.first_frame_at is not None:
            ttfa_ms = round((playback.first_frame_at - utterance.ask.received_at) * 1000, 1)
        timing = tally.timing(ttfa_ms, playback.frames_written / playback.sample_rate)
        resume = False
        with core.lock:
            if utterance.stop.stopped and not utterance.stop_reason and utterance.preempted:
                # Pre-empted by an alert, and no stop since: resume at the unit that was
                # being heard. Decided under the lock, so a stop either came first (and
                # wins) or finds it back in the queue.
                if playback.unit_playing is not None:
                    utterance.cursor = playback.unit_playing
                utterance.preempted = False
                utterance.stop = StopToken()
                core.queue.put(utterance, force=True)
                resume = True
        if resume:
            core.report(
                utterance,
                "interrupted",
                reason="preempted by alert",
                resume_at_unit=utterance.cursor,
                **timing,
            )
            return
        if utterance.stop.stopped:
            core.conclude(
                utterance,
                "stopped",
                reason=utterance.stop_reason or "stopped",
                frames_after_stop=playback.frames_after_cancel,
                **timing,
            )
            return
        if playback.frames_written == 0 and not utterance.units:
            core.conclude(utterance, "error", error=NOTHING_SPEAKABLE)
            return
        core.finished(utterance, core.stats, timing, bool(tally.first_cached))
