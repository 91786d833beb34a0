"""One HTTP speech response: audio from a synthesis thread (the core's AudioOut), the
outcome from the core (its Sink), streamed as it is decoded or sent as one file.

A streamed WAV has a header of unknown length: RIFF and data sizes 0xFFFFFFFF.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import struct
from typing import Any

import numpy as np
from aiohttp import web
from magpie_tts.daemon.core.utterance import Event, Utterance

from ..backpressure import bound_send_buffer, deliver
from .fields import ApiError, error_response

UNKNOWN_SIZE = 0xFFFFFFFF


def wav_header(rate: int, data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM WAV header; data_bytes None: unknown length (a stream)."""
    size = UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff = UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", size)
    )


class OutcomeSink:
    """A Sink that resolves `outcome` with the terminal event, on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.outcome: asyncio.Future[Event] = loop.create_future()

    def report(self, utterance: Utterance, event: Event) -> None:  # from a core thread
        if event.terminal:
            self.loop.call_soon_threadsafe(self._settle, event)

    def _settle(self, event: Event) -> None:
        if not self.outcome.done():
            self.outcome.set_result(event)


class AudioResponse(OutcomeSink):
    """The AudioOut and Sink of one HTTP request."""

    def __init__(
        self,
        request: web.Request,
        fmt: str,
        stream_format: str | None,  # None: one whole file; "audio": bytes; "sse": events
        stall_s: float,
    ) -> None:
        self.request = request
        self.fmt = fmt
        self.stream_format = stream_format
        self.stall_s = stall_s
        super().__init__(asyncio.get_running_loop())
        self.response: web.StreamResponse | None = None
        self.rate: int | None = None
        self.whole: list[bytes] = []
        self.samples = 0

    # AudioOut: called from a synthesis thread; blocks while the client catches up.
    def write(self, pcm: np.ndarray, sample_rate: int) -> bool:
        send = self._send(pcm, sample_rate)
        return deliver(self.loop, send, self.stall_s, self.request.transport, "HTTP client")

    async def _send(self, pcm: np.ndarray, rate: int) -> None:
        data = pcm.astype("<i2").tobytes()
        self.samples += len(pcm)
        if self.stream_format is None:
            self.rate = rate
            self.whole.append(data)
            return
        if self.response is None:
            self.rate = rate
            self.response = await self._start(rate)
            if self.fmt == "wav":
                data = wav_header(rate) + data
        if self.stream_format == "sse":
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
            data = f"data: {json.dumps(event)}\n\n".encode()
        await self.response.write(data)

    async def _start(self, rate: int) -> web.StreamResponse:
        if self.stream_format == "sse":
            content_type = "text/event-stream"
        else:
            content_type = "audio/wav" if self.fmt == "wav" else "audio/pcm"
        response = web.StreamResponse(
            headers={
                "Content-Type": content_type,
                "X-Sample-Rate": str(rate),
                "X-Audio-Format": "s16le; channels=1",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # proxies: pass audio on as it comes
            }
        )
        response.enable_chunked_encoding()
        bound_send_buffer(self.request.transport)
        await response.prepare(self.request)
        return response

    async def finish(self, event: Event) -> web.StreamResponse:
        """The response once the utterance has its outcome."""
        problem = event.fields.get("error")
        if event.name == "stopped":
            problem = f"stopped: {event.fields.get('reason', 'stopped')}"
        if event.fields.get("code") and self.response is None:  # refused after admission
            return error_response(400, str(problem), event.fields["code"])  # (its voice)
        if self.response is None and self.stream_format is not None:
            if problem:  # nothing sent yet: a proper error status
                status = 503 if "shutdown" in problem else 500
                if "speakable" in problem:
                    status = 400
                return error_response(status, problem, "synthesis_failed")
            raise ApiError(500, "no audio was made")
        if self.stream_format is None:
            if problem:
                status = 400 if "speakable" in problem else 500
                return error_response(status, problem, "synthesis_failed")
            data = b"".join(self.whole)
            body = (wav_header(self.rate or 22050, len(data)) + data) if self.fmt == "wav" else data
            content_type = "audio/wav" if self.fmt == "wav" else "audio/pcm"
            return web.Response(
                body=body,
                content_type=content_type,
                headers={"X-Sample-Rate": str(self.rate), "Cache-Control": "no-store"},
            )
        assert self.response is not None
        with contextlib.suppress(ConnectionError, RuntimeError):
            if self.stream_format == "sse":
                done: dict[str, Any] = {"type": "speech.audio.done"}
                if problem:
                    done["error"] = problem
                await self.response.write(f"data: {json.dumps(done)}\n\n".encode())
            await self.response.write_eof()
        return self.response
