"""Audio from a synthesis thread into an asyncio connection, with bounded buffering.

Both network frontends (Wyoming, HTTP) hand PCM from the core's client thread to their
event loop and wait until it is written: a client that reads slowly slows its own
synthesis, and one that stops reading is cut off after `limits.client_stall_s`, instead
of its whole utterance piling up in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

log = logging.getLogger(__name__)

SEND_BUFFER_BYTES = 128 * 1024  # ≈ 3 s of 22.05 kHz s16 audio may wait for a slow client
TRANSPORT_HIGH_WATER = 64 * 1024


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
    try:
        future.result(timeout=stall_s)
        return True
    except FutureTimeout:
        future.cancel()
        log.warning("%s stopped reading for %.0f s; cutting it off", who, stall_s)
        if transport is not None:
            loop.call_soon_threadsafe(transport.close)
        return False
    except (ConnectionError, RuntimeError, asyncio.CancelledError):
        return False
    except Exception as exc:  # the connection's own "gone" signal
        log.debug("%s: audio not delivered: %s", who, exc)
        return False
