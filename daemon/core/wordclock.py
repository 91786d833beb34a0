"""Word and mark events of a speaker utterance, each reported when it sounds.

An ask with `marks` (MQTT JSON `"marks": true`) gets an event per word (`word`: word,
start, end) and per SSML mark (`mark`: mark, time) on its sink, when the player has
written the word's first frame to the device (ALSA takes frames as fast as it plays
them: the word sounds one buffer later).
The times come with the chunks (engine WordTime, before the audio they describe), so a
thread waits for each one's moment; a stop ends it, and nothing is reported after.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magpie_tts.daemon.player import Playback

    from .core import Core
    from .utterance import Utterance


class WordClock:
    def __init__(self, core: Core, utterance: Utterance, playback: Playback) -> None:
        self.core, self.utterance, self.playback = core, utterance, playback
        self._words: collections.deque[Any] = collections.deque()
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="magpie-words", daemon=True)
        self._thread.start()

    def add(self, words: list[Any]) -> None:
        with self._cond:
            self._words.extend(words)
            self._cond.notify_all()

    def close(self) -> None:
        """No more words come; those waiting are still reported when they sound."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _over(self) -> bool:
        return self.utterance.stop.stopped or self.playback.cancelled

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._words and not self._closed and not self._over():
                    self._cond.wait(0.2)
                if self._over() or not self._words:
                    return
                word = self._words.popleft()
            if not self._wait_until(word.start):
                return
            if word.kind == "mark":
                self.core.report(self.utterance, "mark", mark=word.word, time=word.start)
            else:
                self.core.report(
                    self.utterance, "word", word=word.word, start=word.start, end=word.end
                )

    def drain(self, timeout: float = 5.0) -> None:
        """After the playback: the words left are reported now, before the outcome."""
        self.close()
        self._thread.join(timeout)

    def _wait_until(self, offset_s: float) -> bool:
        """Until the player has written the frame `offset_s` into the audio to the device
        (ALSA takes frames at the rate it plays them; False: stopped, or it ended first)."""
        frame = round(offset_s * self.playback.sample_rate)
        while not self._over():
            if self.playback.frames_written > frame:
                return True
            if self.playback.finished.is_set():
                return False
            with self._cond:
                self._cond.wait(0.01)
        return False
