"""An asyncio event loop on its own thread, for a network frontend (Wyoming, HTTP).

The daemon is thread-based (paho, the speaker worker, the player); each asyncio server
gets a loop thread of its own. Listening happens on the caller's thread, so a port in
use fails the start with its reason before the service reports ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def start(self, listen: Awaitable[None], where: str) -> None:
        """Run `listen` (bind and start serving) to completion, then serve on the thread."""
        try:
            self.loop.run_until_complete(listen)
        except OSError as exc:
            self.loop.close()
            raise OSError(f"{where}: cannot listen: {exc}") from exc
        self._thread = threading.Thread(target=self.loop.run_forever, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, cleanup: Callable[[], Awaitable[None]], timeout: float = 3.0) -> None:
        """Run `cleanup` on the loop (close the server and its connections), then end it."""
        if self._thread is None or self.loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(cleanup(), self.loop)  # type: ignore[arg-type]
        with contextlib.suppress(Exception):
            future.result(timeout=timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
