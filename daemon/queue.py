"""Bounded priority queue of requests (alert > normal > low, FIFO within) and a rate limit."""

from __future__ import annotations

import collections
import heapq
import threading
import time

from .requests import PayloadError, Request


class RequestQueue:
    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._heap: list[tuple[tuple[int, int], Request]] = []
        self._cond = threading.Condition()
        self._closed = False

    def put(self, request: Request, force: bool = False) -> None:
        """Queue a request; a full queue is an error the sender hears about (no drop)."""
        with self._cond:
            if not force and len(self._heap) >= self.max_items:
                raise PayloadError(f"queue full ({self.max_items} utterances waiting)", request.id)
            heapq.heappush(self._heap, (request.rank, request))
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Request | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._heap or self._closed, timeout):
                return None
            if not self._heap:
                return None
            return heapq.heappop(self._heap)[1]

    def remove(self, request_id: str | None) -> list[Request]:
        """Remove one request by id, or all when None; returns what was removed."""
        with self._cond:
            removed = [r for _, r in self._heap if request_id is None or r.id == request_id]
            if removed:
                self._heap = [(k, r) for k, r in self._heap if r not in removed]
                heapq.heapify(self._heap)
            return removed

    def find(self, request_id: str) -> Request | None:
        with self._cond:
            return next((r for _, r in self._heap if r.id == request_id), None)

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class RateLimiter:
    """At most `per_minute` accepted requests in any sliding 60 s window."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._times: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def check(self, request_id: str | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            while self._times and now - self._times[0] > 60.0:
                self._times.popleft()
            if len(self._times) >= self.per_minute:
                raise PayloadError(
                    f"rate limit: more than {self.per_minute} requests per minute", request_id
                )
            self._times.append(now)
