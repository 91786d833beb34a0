"""ALSA playback thread: S16_LE mono frames in periods, barge-in, xrun and device recovery.

The player owns the sound card. Synthesis hands it PCM chunks per utterance; it writes
one period at a time (blocking) so a stop is noticed within a period and the ALSA buffer
(periods × period_frames, < 50 ms by default) is dropped at once.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .config import AudioConfig

if TYPE_CHECKING:
    from magpie_tts.engine import StreamingSynthesizer, SynthesisOptions

    from .config import Config

log = logging.getLogger(__name__)

EPIPE = -32


class DeviceError(Exception):
    """The ALSA device could not be opened or stopped working."""


@dataclass(eq=False)
class Playback:
    """One utterance as the player sees it; timestamps are time.monotonic()."""

    sample_rate: int
    volume: float = 1.0
    on_first_frame: Callable[[Playback], None] | None = None
    on_done: Callable[[Playback], None] | None = None
    first_frame_at: float | None = None
    frames_written: int = 0
    cancelled_at: float | None = None
    frames_after_cancel: int = 0
    unit_playing: int | None = None  # index of the unit whose audio is being written
    finished: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None


class AlsaOutput:
    """pyalsaaudio PCM with the retry rules the player needs."""

    def __init__(self, config: AudioConfig) -> None:
        self.config = config
        self.pcm = None
        self.rate = 0
        self.xruns = 0

    def open(self, rate: int) -> None:
        import alsaaudio

        self.close()
        try:
            self.pcm = alsaaudio.PCM(
                type=alsaaudio.PCM_PLAYBACK,
                mode=alsaaudio.PCM_NORMAL,
                device=self.config.device,
                rate=rate,
                channels=1,
                format=alsaaudio.PCM_FORMAT_S16_LE,
                periodsize=self.config.period_frames,
                periods=self.config.periods,
            )
        except alsaaudio.ALSAAudioError as exc:
            self.pcm = None
            raise DeviceError(f"cannot open ALSA device {self.config.device!r}: {exc}") from exc
        self.rate = rate

    def write(self, data: bytes, fresh: bool) -> None:
        """Write all of data; an underrun drops the call's data, so write it again."""
        import alsaaudio

        if self.pcm is None:
            raise DeviceError("ALSA device is not open")
        for _attempt in range(4):
            try:
                written = self.pcm.write(data)
            except alsaaudio.ALSAAudioError as exc:
                self.close()
                raise DeviceError(f"ALSA write failed on {self.config.device!r}: {exc}") from exc
            if written != EPIPE:
                return
            if not fresh:  # after idle a dry buffer is expected, not an xrun
                self.xruns += 1
                log.warning("ALSA underrun (xrun %d); recovered", self.xruns)
            fresh = True
        raise DeviceError("ALSA device keeps underrunning")

    def drop(self) -> None:
        if self.pcm is not None:
            try:
                self.pcm.drop()
            except Exception as exc:  # a vanished device also fails here
                log.debug("ALSA drop failed: %s", exc)

    def close(self) -> None:
        if self.pcm is not None:
            with contextlib.suppress(Exception):  # a broken device must not mask the cause
                self.pcm.close()
            self.pcm = None


_Item = tuple[Playback, "np.ndarray | None", "int | None"]  # (utterance, pcm, unit index)


class Player:
    """Thread that drains a queue of (playback, pcm) items into ALSA."""

    def __init__(
        self,
        config: AudioConfig,
        on_device_error: Callable[[str], None] | None = None,
        on_device_ok: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.output = AlsaOutput(config)
        self.on_device_error = on_device_error
        self.on_device_ok = on_device_ok
        self.device_error: str | None = None
        self._items: collections.deque[_Item] = collections.deque()
        self._queued_frames = 0
        self._cond = threading.Condition()
        self._closing = False
        self._current: Playback | None = None
        self._idle = True
        self.heartbeat = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="magpie-player", daemon=True)

    # -- producer side -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(
        self,
        playback: Playback,
        pcm: np.ndarray,
        timeout: float | None = None,
        unit: int | None = None,
    ) -> bool:
        """Queue audio; blocks while more than lead_seconds are queued. False if cancelled."""
        lead = int(self.config.lead_seconds * playback.sample_rate)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queued_frames > lead and not playback.cancelled and not self._closing:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.05 if remaining is None else min(0.05, remaining))
            if playback.cancelled or self._closing:
                return False
            self._items.append((playback, pcm, unit))
            self._queued_frames += len(pcm)
            self._cond.notify_all()
            return True

    def finish(self, playback: Playback) -> None:
        """Mark the end of an utterance; on_done fires once its last frame is written."""
        with self._cond:
            self._items.append((playback, None, None))
            self._cond.notify_all()

    def cancel(self, playback: Playback | None = None) -> None:
        """Barge-in: drop queued audio of one utterance (or all) and the ALSA buffer."""
        now = time.monotonic()
        with self._cond:
            kept: collections.deque[_Item] = collections.deque()
            for item in self._items:
                target, pcm, _unit = item
                if playback is None or target is playback:
                    if target.cancelled_at is None:
                        target.cancelled_at = now
                    if pcm is not None:
                        self._queued_frames -= len(pcm)
                    else:
                        kept.append(item)  # keep end markers so on_done still fires
                else:
                    kept.append(item)
            self._items = kept
            current = self._current
            targeted = current is not None and (playback is None or current is playback)
            if targeted and current.cancelled_at is None:
                current.cancelled_at = now
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        return self._idle

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(5)
        self.output.close()

    # -- player thread ---------------------------------------------------------------------

    def _next(self) -> _Item | None:
        with self._cond:
            while not self._items and not self._closing:
                self._idle = True
                self.heartbeat = time.monotonic()
                self._cond.wait(0.5)
            if self._closing:
                return None
            item = self._items.popleft()
            if item[1] is not None:
                self._queued_frames -= len(item[1])
            self._current = item[0]
            self._idle = False
            self._cond.notify_all()
            return item

    def _run(self) -> None:
        fresh = True
        while True:
            item = self._next()
            if item is None:
                return
            playback, pcm, unit = item
            if pcm is None:
                self._complete(playback)
                fresh = True
                continue
            if playback.cancelled:
                continue
            if unit is not None:
                playback.unit_playing = unit
            self._play(playback, pcm, fresh)
            fresh = False
            if playback.cancelled:
                self.output.drop()
                fresh = True

    def _complete(self, playback: Playback) -> None:
        with self._cond:
            self._current = None
        playback.finished.set()
        if playback.on_done is not None:
            playback.on_done(playback)

    def _ensure_open(self, rate: int, playback: Playback) -> bool:
        delay = 0.2
        while self.output.pcm is None or self.output.rate != rate:
            try:
                self.output.open(rate)
            except DeviceError as exc:
                self._report_error(str(exc))
                if playback.cancelled or self._closing:
                    return False
                self.heartbeat = time.monotonic()
                time.sleep(delay)
                delay = min(delay * 2, self.config.open_retry_max_s)
                continue
            if self.device_error is not None:
                log.info("ALSA device %s is back", self.config.device)
                self.device_error = None
                if self.on_device_ok is not None:
                    self.on_device_ok()
        return True

    def _report_error(self, message: str) -> None:
        if message != self.device_error:
            log.error("%s (retrying with backoff)", message)
            self.device_error = message
            if self.on_device_error is not None:
                self.on_device_error(message)

    def _play(self, playback: Playback, pcm: np.ndarray, fresh: bool) -> None:
        volume = playback.volume * self.config.volume
        if volume != 1.0:
            pcm = np.clip(pcm.astype(np.float32) * volume, -32768, 32767).astype(np.int16)
        period = self.config.period_frames
        position = 0
        while position < len(pcm):
            if playback.cancelled or self._closing:
                return
            if not self._ensure_open(playback.sample_rate, playback):
                return
            data = pcm[position : position + period].tobytes()
            try:
                self.output.write(data, fresh)
            except DeviceError as exc:
                self._report_error(str(exc))
                fresh = True
                continue  # reopen and rewrite this period
            fresh = False
            frames = min(period, len(pcm) - position)
            position += frames
            playback.frames_written += frames
            self.heartbeat = time.monotonic()
            if playback.cancelled_at is not None:
                playback.frames_after_cancel += frames
            if playback.first_frame_at is None:
                playback.first_frame_at = time.monotonic()
                if playback.on_first_frame is not None:
                    playback.on_first_frame(playback)


def play_once(
    config: Config, synth: StreamingSynthesizer, text: str, options: SynthesisOptions
) -> int:
    """Speak one text on the configured ALSA device (used by `magpie-tts say`)."""
    probe = AlsaOutput(config.audio)
    try:
        probe.open(synth.voice.sample_rate)  # fail fast: a one-shot has no one to wait for
    except DeviceError as exc:
        log.error("%s", exc)
        return 1
    probe.close()
    player = Player(config.audio)
    player.start()
    playback = Playback(sample_rate=synth.voice.sample_rate)
    try:
        for chunk in synth.stream(text, options):
            player.submit(playback, chunk.pcm)
        player.finish(playback)
        playback.finished.wait()
    finally:
        player.close()
    if player.device_error:
        log.error("%s", player.device_error)
        return 1
    return 0
