"""One rate limit: at most `per_minute` accepted requests in any sliding 60 s window,
per key: the core keys it by frontend (one frontend cannot use up another's budget),
the HTTP frontend by client address. Only accepted requests count: a refused one costs
no budget."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable

WINDOW_S = 60.0
MAX_KEYS = 10_000  # past this many clients, those idle for a window are forgotten


class RateLimit:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._times: dict[Hashable, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def allows(self, key: Hashable = None) -> bool:
        """Whether one more request for `key` stays within the limit; counts nothing."""
        return self.retry_after(key) == 0

    def retry_after(self, key: Hashable = None) -> float:
        """Seconds until one more request for `key` stays within the limit; 0: now."""
        with self._lock:
            times = self._recent(key)
            if len(times) < self.per_minute:
                return 0.0
            # one more fits once all but per_minute - 1 of them have left the window
            return max(0.001, times[-self.per_minute] + WINDOW_S - self._clock())

    def take(self, key: Hashable = None) -> None:
        """Count an accepted request for `key`."""
        with self._lock:
            self._recent(key).append(self._clock())

    def _recent(self, key: Hashable) -> collections.deque[float]:
        """The key's times within the window (call with the lock held)."""
        now = self._clock()
        times = self._times.get(key)
        if times is None:
            if len(self._times) >= MAX_KEYS:
                for idle in [k for k, v in self._times.items() if not v or now - v[-1] > WINDOW_S]:
                    del self._times[idle]
            times = self._times[key] = collections.deque()
        while times and now - times[0] > WINDOW_S:
            times.popleft()
        return times
