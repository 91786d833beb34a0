"""Word and mark events of a speaker utterance, each reported when it sounds.

An ask with `marks` (MQTT JSON `"marks": true`) gets an event per word (`word`: word,
start, end) and per SSML mark (`mark`: mark, time) on its sink, at the moment the word
plays: the playback's first frame (handed to ALSA) plus the word's start in the audio.
The times come with the chunks (engine WordTime, before the audio they describe), so a
thread waits for each one's moment; a stop ends it, and nothing is reported after.
"""

from __future__ import annotations

import collections
import threading
import time
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

    def _wait_until(self, offset_s: float) -> bool:
        """Until `offset_s` into the playback (False: stopped, or it never played)."""
        while not self._over():
            began = self.playback.first_frame_at
            if began is None:
                if self.playback.finished.is_set():
                    return False
                due = 0.01
            else:
                due = began + offset_s - time.monotonic()
                if due <= 0:
                    return True
            with self._cond:
                self._cond.wait(min(due, 0.05))
        return False
