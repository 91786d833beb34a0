"""Client-bound utterances: which are open, and which hold one of the synthesis slots.

A slot is synthesis work at once (`limits.max_streams`: by default the capacity measured
from the voice's speed, capacity.py), so only an utterance that is
making audio holds one. A one-shot has its whole text and takes its slot on admission. A
stream (text arriving piece by piece, from a Wyoming session or an HTTP text body) takes
one only while it has a unit to synthesize, and gives it back while it waits for more
text: a client that trickles its text, a byte every few seconds, holds no slot and so
keeps nobody else out. Streams waiting for text are bounded apart, per frontend
(`limits.max_waiting_streams`), so one frontend's tricklers cannot shut out another's.
A request that would miss the first-audio budget under the load now is shed at
admission (capacity.py), like one past the limit: refused at once, never left to stall.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from .capacity import Capacity, Load
from .utterance import Refused, Utterance

RETRY_AFTER_S = 1.0  # a refused client's next try: about one utterance's first turns later


class StreamSlots:
    def __init__(self, capacity: Capacity, max_waiting: int) -> None:
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.open: set[Utterance] = set()
        self._making: set[Utterance] = set()
        self._sounding: set[Utterance] = set()  # open utterances that have made audio
        self._wanting: set[Utterance] = set()  # streams with a unit, waiting for a slot
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return len(self.open)

    @property
    def max_streams(self) -> int:
        return self.capacity.limit

    def load(self, speaker_busy: bool) -> Load:
        """Streams making audio now, with and without audio made yet."""
        with self._cond:
            started = len(self._making & self._sounding) + int(speaker_busy)
            return Load(started, len(self._making - self._sounding) + len(self._wanting))

    def shed(self, utterance: Utterance, for_speaker: bool, load: Load) -> None:
        """Raise Refused (busy) when its first audio would miss the budget (capacity.py)."""
        predicted = self.capacity.over_budget(utterance.ask.priority, for_speaker, load)
        if predicted is not None:
            shown = "never" if predicted == float("inf") else f"in {predicted * 1000:.0f} ms"
            raise Refused(
                f"busy: first audio would come {shown}, past the "
                f"{self.capacity.budget_s * 1000:.0f} ms budget",
                utterance.id,
                retry_after=RETRY_AFTER_S,
                code="busy",
            )

    def sounding(self, utterance: Utterance) -> None:
        """Its first audio is out: from now on it is a started stream (load)."""
        with self._cond:
            if utterance in self.open:
                self._sounding.add(utterance)

    def admit(self, utterance: Utterance, speaker_busy: bool = False) -> None:
        """Open a client-bound utterance, or raise Refused; a one-shot takes its slot."""
        with self._cond:
            if utterance.stream is None:
                if len(self._making) + len(self._wanting) >= self.max_streams:
                    raise Refused(
                        f"too many streams at once (limit {self.max_streams})",
                        utterance.id,
                        retry_after=RETRY_AFTER_S,
                        code="busy",
                    )
                self.shed(utterance, False, self.load(speaker_busy))
                self._making.add(utterance)
            else:
                frontend = utterance.ask.frontend
                waiting = sum(1 for u in self.open - self._making if u.ask.frontend == frontend)
                if waiting >= self.max_waiting:
                    raise Refused(
                        f"too many streams waiting for text (limit {self.max_waiting})",
                        utterance.id,
                        code="busy",
                    )
                self.shed(utterance, False, self.load(speaker_busy))
            self.open.add(utterance)

    def paced(self, utterance: Utterance, units: Iterable[str]) -> Iterator[str]:
        """A stream's units, with its slot held only from a unit's arrival until the next
        is asked for (that is, while the engine makes its audio)."""
        pending = iter(units)
        while True:
            self._release(utterance)
            unit = next(pending, None)  # may wait for text: no slot held meanwhile
            if unit is None or not self._take(utterance):
                return
            yield unit

    def _take(self, utterance: Utterance) -> bool:
        """Wait for a free slot; False if the utterance was stopped meanwhile."""
        with self._cond:
            self._wanting.add(utterance)
            try:
                while len(self._making) >= self.max_streams:
                    if utterance.stop.stopped:
                        return False
                    self._cond.wait(0.5)
                self._making.add(utterance)
                return True
            finally:
                self._wanting.discard(utterance)

    def _release(self, utterance: Utterance) -> None:
        with self._cond:
            if utterance in self._making:
                self._making.discard(utterance)
                self._cond.notify_all()

    def close(self, utterance: Utterance) -> None:
        """The utterance is over (concluded): its slot and its place are free."""
        with self._cond:
            self.open.discard(utterance)
            self._making.discard(utterance)
            self._sounding.discard(utterance)
            self._cond.notify_all()

    def wake(self) -> None:
        """A stop: waiters re-check whether they were stopped."""
        with self._cond:
            self._cond.notify_all()
