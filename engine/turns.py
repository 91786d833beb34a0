"""Turns on the shared sessions: many streams, one decoder, the most urgent window next.

A synthesizer's sessions and preallocated decoder buffers serve every stream, so one
window runs at a time (on a 2-core board parallel windows would only share the same
cores). Instead of a plain lock — whose order is arbitrary — waiting streams are served
by urgency, least laxity first:
1. a stream that has started and is about to run dry (less than `GUARD_S` of audio
   ahead of its playback clock): an underrun is heard, so it goes first;
2. streams that have made no audio yet (a listener waits for first sound): the local
   speaker before clients, then oldest first;
3. the others, least audio ahead first.
The local speaker counts as `SPEAKER_MARGIN_S` more urgent than a client everywhere, so
playback keeps priority without starving the clients.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SPEAKER, CLIENT = 0, 1
GUARD_S = 0.15  # less audio ahead than this: serve before streams still waiting to start
SPEAKER_MARGIN_S = 0.5


class Pace:
    """One stream's progress: audio made against the wall clock since its first chunk."""

    def __init__(self, priority: int = SPEAKER) -> None:
        self.priority = priority
        self.created = time.perf_counter()
        self.first_at: float | None = None
        self.audio_s = 0.0

    def made(self, seconds: float) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.audio_s += seconds

    def urgency(self) -> tuple[int, float, float]:
        """Smaller is more urgent."""
        if self.first_at is None:
            return (1, float(self.priority), self.created)
        margin = SPEAKER_MARGIN_S if self.priority == SPEAKER else 0.0
        slack = self.audio_s - (time.perf_counter() - self.first_at) - margin
        return (0 if slack < GUARD_S else 2, slack, self.created)


class Turns:
    """A lock whose waiters are served most urgent first, urgency judged at hand-over
    (a stream's slack shrinks while it waits)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._waiting: list[tuple[Pace, int]] = []
        self._chosen: tuple[Pace, int] | None = None
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    @contextmanager
    def turn(self, pace: Pace) -> Iterator[None]:
        with self._cond:
            if self._busy or self._waiting:
                entry = (pace, next(self._order))
                self._waiting.append(entry)
                while self._chosen is not entry:
                    self._cond.wait()
                self._chosen = None
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                if self._waiting:
                    best = min(self._waiting, key=lambda e: (e[0].urgency(), e[1]))
                    self._waiting.remove(best)
                    self._chosen = best
                    self._busy = True  # held for the chosen waiter: no one cuts in
                    self._cond.notify_all()
