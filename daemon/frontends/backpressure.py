"""Audio into an asyncio connection, with bounded buffering and a stall judged by progress.

Both network frontends (Wyoming, HTTP) hand PCM from the core's client thread to their
event loop and wait until it is written: a client that reads slowly slows its own
synthesis, and one that stops reading is cut off after `limits.client_stall_s`, instead
of its whole utterance piling up in memory.

A stall is judged by progress, not by whole writes: a client that reads steadily in
small reads takes a large chunk slowly and is not cut off; one whose connection takes
nothing for `stall_s` is. Progress is the connection's pending output going down: the
transport's buffer plus, on Linux, the kernel's send queue (what the client has not yet
taken in).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import socket
import struct
import termios
import time
from collections.abc import Awaitable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

log = logging.getLogger(__name__)

SEND_BUFFER_BYTES = 128 * 1024  # ≈ 3 s of 22.05 kHz s16 audio may wait for a slow client
TRANSPORT_HIGH_WATER = 64 * 1024
TICK_S = 0.5  # how often a waiting write looks at the connection's progress


def bound_send_buffer(transport: asyncio.BaseTransport | None) -> None:
    """A small kernel send buffer and transport buffer, so writes to a client that
    stops reading block soon (loopback buffers otherwise grow to megabytes)."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    if isinstance(transport, asyncio.WriteTransport):
        transport.set_write_buffer_limits(high=TRANSPORT_HIGH_WATER)


class StallWatch:
    """Whether a connection still takes what is written to it, looked at now and then
    while a write waits."""

    def __init__(self, transport: asyncio.BaseTransport | None, stall_s: float) -> None:
        self.transport = transport
        self.stall_s = stall_s
        self.tick = min(TICK_S, stall_s)
        self._least: int | None = None
        self._since = time.monotonic()

    def stalled(self) -> bool:
        """True once the pending output has not gone down for `stall_s`."""
        now = time.monotonic()
        pending = self._pending()
        if pending is not None and (self._least is None or pending < self._least):
            self._least, self._since = pending, now
            return False
        return now - self._since >= self.stall_s

    def _pending(self) -> int | None:
        """Bytes written but not yet taken by the client; None if it cannot be told."""
        transport = self.transport
        if not isinstance(transport, asyncio.WriteTransport):
            return None
        try:
            pending = transport.get_write_buffer_size()
        except Exception:  # a closed transport
            return None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                pending += struct.unpack("i", queued)[0]
        return pending

    def cut_off(self, loop: asyncio.AbstractEventLoop, who: str) -> None:
        log.warning("%s took nothing for %.0f s; cutting it off", who, self.stall_s)
        if self.transport is not None:
            loop.call_soon_threadsafe(self.transport.close)


def deliver(
    loop: asyncio.AbstractEventLoop,
    send: Coroutine[Any, Any, None],
    stall_s: float,
    transport: asyncio.BaseTransport | None,
    who: str,
) -> bool:
    """Run `send` on the loop and wait for it (from a synthesis thread). False when the
    client is gone, or stalled for `stall_s` (then its connection is closed)."""
    future = asyncio.run_coroutine_threadsafe(send, loop)
    watch = StallWatch(transport, stall_s)
    while True:
        try:
            future.result(timeout=watch.tick)
            return True
        except FutureTimeout:
            if watch.stalled():
                future.cancel()
                watch.cut_off(loop, who)
                return False
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            return False
        except Exception as exc:  # the connection's own "gone" signal
            log.debug("%s: audio not delivered: %s", who, exc)
            return False


async def paced(
    write: Awaitable[None], transport: asyncio.BaseTransport | None, stall_s: float, who: str
) -> bool:
    """Await `write` on the loop, with the same stall rule as `deliver`; False when the
    client is gone or stalled (then its connection is closed)."""
    task = asyncio.ensure_future(write)
    watch = StallWatch(transport, stall_s)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=watch.tick)
            if done:
                task.result()
                return True
            if watch.stalled():
                watch.cut_off(asyncio.get_running_loop(), who)
                return False
    except ConnectionError:
        return False
    finally:
        task.cancel()
