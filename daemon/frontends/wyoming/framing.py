"""Reading one Wyoming event off the wire as a server facing the network must: each
header vetted before the `wyoming` package parses the event (sizes bounded, types
checked), and an event begun finished in bounded time: a header promising more data or
payload than the client sends is cut off, with a reason (BadFrame), not held open."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import TypeVar

from wyoming.event import Event, async_read_event

T = TypeVar("T")
HEADER_LIMIT = 64 * 1024  # asyncio's line limit: a longer header line is malformed


class BadFrame(Exception):
    """An event that cannot be read; the connection cannot be trusted past it."""

    def __init__(self, text: str, code: str = "malformed-event") -> None:
        super().__init__(text)
        self.code = code


class _Replay:
    """A reader that hands back an already-read header line first, so the `wyoming`
    package parses the event (data and payload framing) after we have vetted it."""

    def __init__(self, line: bytes, reader: asyncio.StreamReader) -> None:
        self._line: bytes | None = line
        self._reader = reader

    async def readline(self) -> bytes:
        line, self._line = self._line, None
        return line if line is not None else await self._reader.readline()

    async def readexactly(self, count: int) -> bytes:
        return await self._reader.readexactly(count)


async def read_event(
    reader: asyncio.StreamReader, max_bytes: int, timeout_s: float
) -> Event | None:
    """The next event (None at the end of the stream): idle before it as long as the
    client likes, but once its first byte came, all of it (header line, data, payload)
    within `timeout_s`: one deadline for the whole event."""
    first = await reader.read(1)
    if not first:
        return None
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        rest = b""
        if first != b"\n":
            rest = await _by(deadline, reader.readline(), "event header", timeout_s)
        line = first + rest
    except ValueError:  # asyncio's LimitOverrunError: no newline within the limit
        raise BadFrame(f"event header longer than {HEADER_LIMIT} bytes") from None
    try:
        header = json.loads(line)
    except ValueError:
        raise BadFrame("event header is not a JSON line") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise BadFrame('event header must be a JSON object with a string "type"')
    if not isinstance(header.get("data", {}), dict):
        raise BadFrame('event "data" must be a JSON object')
    for key in ("data_length", "payload_length"):
        value = header.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= max_bytes
        ):
            raise BadFrame(f"{key} must be an integer between 0 and {max_bytes}")
    parse = async_read_event(_Replay(line, reader))  # type: ignore[arg-type]
    event = await _by(deadline, parse, "the event's data and payload", timeout_s)
    if event is None:
        raise BadFrame("event data is not a JSON object in UTF-8")
    return event


async def _by(deadline: float, step: Awaitable[T], what: str, timeout_s: float) -> T:
    """`step`, if it completes by `deadline` (the loop's clock); else the event is cut.
    (asyncio.wait_for rather than asyncio.timeout: Python 3.10 boards, Jetsons among them.)"""
    remaining = max(0.0, deadline - asyncio.get_running_loop().time())
    try:
        return await asyncio.wait_for(step, remaining)
    except asyncio.TimeoutError:
        raise BadFrame(
            f"{what} not received within {timeout_s:g} s (limits.client_read_timeout_s)",
            "timeout",
        ) from None
