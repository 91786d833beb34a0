"""Bounded priority queue of utterances (alert > normal > low, FIFO within)."""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable

from .utterance import Refused, Utterance


class UtteranceQueue:
    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._heap: list[tuple[tuple[int, int], Utterance]] = []
        self._cond = threading.Condition()
        self._closed = False

    def check_room(self, utterance: Utterance) -> None:
        with self._cond:
            if len(self._heap) >= self.max_items:
                raise Refused(
                    f"queue full ({self.max_items} utterances waiting)", utterance.id, code="busy"
                )

    def put(self, utterance: Utterance, force: bool = False) -> None:
        """Queue an utterance; a full queue is an error the sender hears about (no drop).
        force: a resumed utterance goes back whatever the size (it was accepted already)."""
        with self._cond:
            if not force:
                self.check_room(utterance)
            heapq.heappush(self._heap, (utterance.rank, utterance))
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Utterance | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._heap or self._closed, timeout):
                return None
            if not self._heap:
                return None
            return heapq.heappop(self._heap)[1]

    def remove(self, match: Callable[[Utterance], bool]) -> list[Utterance]:
        """Remove the utterances that match; returns them in queue order."""
        with self._cond:
            removed = sorted((k, u) for k, u in self._heap if match(u))
            if removed:
                self._heap = [(k, u) for k, u in self._heap if not match(u)]
                heapq.heapify(self._heap)
            return [u for _, u in removed]

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
