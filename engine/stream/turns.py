"""Turns on the shared sessions: many streams, few lanes, the most urgent window next.

A synthesizer's sessions and preallocated decoder buffers serve every stream, so a
window runs only in a lane of sessions it holds: one alone on all threads, or, while
several streams decode, side by side in worker lanes with a share of the threads each.
Instead of a plain lock — whose order is arbitrary — waiting streams are served by
urgency, least laxity first:
1. a stream that has started and is about to run dry (less than `GUARD_S` of audio
   ahead of its playback clock, beyond what its next turn takes): an underrun is heard,
   so it goes first;
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
PRIMARY = 0  # the lane whose sessions use every thread
GUARD_S = 0.15  # less audio ahead than this: serve before streams still waiting to start
SPEAKER_MARGIN_S = 0.5
RECENT_S = 0.05  # a stream whose turn ended this recently is still decoding (lanes)


class Pace:
    """One stream's progress: audio made against the wall clock since its first chunk."""

    def __init__(self, priority: int = SPEAKER) -> None:
        self.priority = priority
        self.created = time.perf_counter()
        self.first_at: float | None = None
        self.audio_s = 0.0
        # The expected length of the stream's next turn: one that runs a unit's frontend
        # (~0.2 s for a long unit on a one-thread lane) must start that much earlier.
        self.need_s = 0.0

    def made(self, seconds: float) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.audio_s += seconds

    def ahead_s(self) -> float:
        """Audio made beyond the playback clock (0 before the first chunk)."""
        if self.first_at is None:
            return 0.0
        return max(0.0, self.audio_s - (time.perf_counter() - self.first_at))

    def urgency(self) -> tuple[int, float, float]:
        """Smaller is more urgent."""
        if self.first_at is None:
            return (1, float(self.priority), self.created)
        margin = SPEAKER_MARGIN_S if self.priority == SPEAKER else 0.0
        slack = self.audio_s - (time.perf_counter() - self.first_at) - margin
        return (0 if slack < GUARD_S + self.need_s else 2, slack, self.created)


class Turns:
    """A lock whose waiters are served most urgent first, urgency judged at hand-over
    (a stream's slack shrinks while it waits), over lanes of sessions.

    Lane 0 (`PRIMARY`) holds the sessions with every thread and runs alone: one stream
    gets the whole board. With `workers` > 0 there are also that many lanes, each with
    its share of the threads, that run side by side while several streams are decoding:
    on a small CPU two one-thread sessions make 1.36x the work of one two-thread session
    (the frontend's many small ops barely use a second thread), so a burst of streams is
    served sooner.
    A stream counts as decoding while it waits for a turn or ended one under `RECENT_S`
    ago (it is handing its chunk on and comes straight back), until it has ended; a
    stream held back by its consumer drops out, and a lone stream gets the primary lane
    again.
    A `narrow` turn takes a worker lane even alone: an utterance's first turn (the
    frontend over a few words, a small first window) gains next to nothing from a second
    thread (45 against 48 ms measured on one thread and two), and on the primary lane it
    held back every stream that arrived meanwhile: in a burst of ten, the second stream
    started a whole first turn after the first instead of beside it.
    """

    def __init__(self, workers: int = 0) -> None:
        self._cond = threading.Condition()
        self._workers = workers
        self._busy: set[int] = set()  # lanes in use
        self._waiting: list[tuple[Pace, int, bool]] = []  # (stream, order, narrow)
        self._granted: dict[int, int] = {}  # waiter's order number → lane handed to it
        self._recent: dict[Pace, float] = {}  # stream → when its last turn ended
        self._in_turn: set[Pace] = set()
        self._order = itertools.count()
        self._local = threading.local()
        self.turns_by_lane = [0] * (workers + 1)  # turns served in each lane so far

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def others(self, pace: Pace) -> int:
        """Other streams decoding now (waiting, in a turn, or just back from one): turns
        that come before this stream's next one, unless it runs dry first."""
        with self._cond:
            return len(self._decoding_streams() - {pace})

    @property
    def lanes(self) -> int:
        """Turns that run side by side while several streams decode."""
        return max(self._workers, 1)

    def lane(self) -> int:
        """The lane of the calling thread's turn (PRIMARY outside a turn)."""
        return getattr(self._local, "lane", PRIMARY)

    @contextmanager
    def turn(self, pace: Pace, narrow: bool = False) -> Iterator[int]:
        with self._cond:
            lane = None if self._waiting else self._free_lane(self._decoding(pace), narrow)
            if lane is None:
                entry = (pace, next(self._order), narrow)
                self._waiting.append(entry)
                while entry[1] not in self._granted:
                    self._cond.wait()
                lane = self._granted.pop(entry[1])
            else:
                self._busy.add(lane)
            self.turns_by_lane[lane] += 1
            self._in_turn.add(pace)
        self._local.lane = lane
        try:
            yield lane
        finally:
            self._local.lane = PRIMARY
            with self._cond:
                self._busy.discard(lane)
                self._in_turn.discard(pace)
                self._recent[pace] = time.perf_counter()
                self._hand_over()

    def ended(self, pace: Pace) -> None:
        """The stream has made its last audio: it no longer counts as decoding (a stream
        starting just after it is alone, and gets the primary lane at once)."""
        with self._cond:
            self._recent.pop(pace, None)

    def _decoding(self, pace: Pace | None = None) -> int:
        """Streams decoding now, with `pace`."""
        return len(self._decoding_streams() | ({pace} if pace is not None else set()))

    def _decoding_streams(self) -> set[Pace]:
        """Streams waiting, in a turn, or back from one within RECENT_S."""
        now = time.perf_counter()
        self._recent = {p: t for p, t in self._recent.items() if now - t < RECENT_S}
        return {entry[0] for entry in self._waiting} | set(self._recent) | self._in_turn

    def _free_lane(self, decoding: int, narrow: bool = False) -> int | None:
        """The lane a turn may take now: the primary lane when nothing runs and no other
        stream is decoding (unless the turn is narrow), else a free worker lane (never
        beside the primary lane)."""
        if PRIMARY in self._busy:
            return None
        if not self._busy and (not self._workers or (decoding <= 1 and not narrow)):
            return PRIMARY
        return next((w for w in range(1, self._workers + 1) if w not in self._busy), None)

    def _hand_over(self) -> None:
        """Free lanes to the most urgent waiters (called with the condition held)."""
        granted = False
        while self._waiting:
            best = min(self._waiting, key=lambda e: (e[0].urgency(), e[1]))
            lane = self._free_lane(self._decoding(), narrow=best[2])
            if lane is None:
                break
            self._waiting.remove(best)
            self._granted[best[1]] = lane
            self._busy.add(lane)  # held for the chosen waiter: no one cuts in
            granted = True
        if granted:
            self._cond.notify_all()
