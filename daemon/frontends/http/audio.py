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

from ..backpressure import bound_send_buffer, deliver, paced
from .fields import ApiError, error_response

UNKNOWN_SIZE = 0xFFFFFFFF
FILE_PIECE = 64 * 1024  # a whole file goes out in pieces of this size


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
    """The AudioOut and Sink of one HTTP request.

    Every accepted request ends in one answer that tells the truth: audio cut short (a
    stop at shutdown, a synthesis error, a bad piece of streamed text) never looks
    complete. Before any audio went out that is an error status; a plain audio stream
    is ended without its last chunk (the client sees an incomplete body); an SSE stream
    ends with `speech.audio.done` carrying `error`.
    """

    def __init__(
        self,
        request: web.Request,
        fmt: str,
        stream_format: str | None,  # None: one whole file; "audio": bytes; "sse": events
        stall_s: float,
        max_file_s: float,
    ) -> None:
        self.request = request
        self.fmt = fmt
        self.stream_format = stream_format
        self.stall_s = stall_s
        self.max_file_s = max_file_s
        super().__init__(asyncio.get_running_loop())
        self.response: web.StreamResponse | None = None
        self.rate: int | None = None
        self.whole = bytearray()  # a whole file's PCM: one buffer, sent in pieces
        self.refusal: ApiError | None = None

    def refuse(self, error: ApiError) -> None:
        """This request cannot be answered with its audio (a bad piece of its text, a
        file over the limit): its answer is this error, whatever was made."""
        if self.refusal is None:
            self.refusal = error

    # AudioOut: called from a synthesis thread; blocks while the client catches up.
    def write(self, pcm: np.ndarray, sample_rate: int) -> bool:
        if self.stream_format is None:
            return self._keep(pcm, sample_rate)
        send = self._send(pcm, sample_rate)
        return deliver(self.loop, send, self.stall_s, self.request.transport, "HTTP client")

    def _keep(self, pcm: np.ndarray, rate: int) -> bool:
        """A whole file's audio, kept until the end (a WAV states its length first)."""
        self.rate = rate
        if (len(self.whole) + 2 * len(pcm)) / (2 * rate) > self.max_file_s:
            self.refuse(
                ApiError(
                    413,
                    f"the whole file would be over {self.max_file_s:g} s of audio: "
                    'ask for a stream ("stream": true, /tts/stream or /v1/audio/speech)',
                    "too-long",
                )
            )
            return False  # ends the synthesis
        self.whole += pcm.astype("<i2").tobytes()
        return True

    async def _send(self, pcm: np.ndarray, rate: int) -> None:
        data = pcm.astype("<i2").tobytes()
        if self.response is None:
            self.rate = rate
            self.response = await self._start(rate)
            if self.fmt == "wav":
                data = wav_header(rate) + data
        if self.stream_format == "sse":
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
            data = f"data: {json.dumps(event)}\n\n".encode()
        await self.response.write(data)

    def _headers(self, rate: int) -> dict[str, str]:
        if self.stream_format == "sse":
            content_type = "text/event-stream"
        else:
            content_type = "audio/wav" if self.fmt == "wav" else "audio/pcm"
        return {
            "Content-Type": content_type,
            "X-Sample-Rate": str(rate),
            "X-Audio-Format": "s16le; channels=1",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # proxies: pass audio on as it comes
        }

    async def _start(self, rate: int) -> web.StreamResponse:
        response = web.StreamResponse(headers=self._headers(rate))
        response.enable_chunked_encoding()
        bound_send_buffer(self.request.transport)
        await response.prepare(self.request)
        return response

    async def finish(self, event: Event) -> web.StreamResponse:
        """The response once the utterance has its outcome."""
        failure = self.refusal or failure_of(event)
        warning = event.fields.get("error") if failure is None else None
        if self.response is None:  # nothing sent yet
            if failure is not None:
                return error_response(failure.status, str(failure), failure.code)
            if self.stream_format is not None:
                raise ApiError(500, "no audio was made")
            if warning:  # a text body that went idle: not the whole file asked for
                return error_response(500, str(warning), "synthesis_failed")
            return await self._send_file()
        # A text body that went idle before its end (`warning`) was not all said: cut
        # short, like a failure, whatever the client does with the bytes so far.
        if self.stream_format == "audio" and (failure is not None or warning):
            self._abort()
            return self.response
        with contextlib.suppress(ConnectionError, RuntimeError):
            if self.stream_format == "sse":
                done: dict[str, Any] = {"type": "speech.audio.done"}
                if failure is not None or warning:
                    done["error"] = str(failure or warning)
                await self.response.write(f"data: {json.dumps(done)}\n\n".encode())
            await self.response.write_eof()
        return self.response

    def _abort(self) -> None:
        """End a cut-short stream without its terminating chunk: what was sent goes out,
        then the connection closes, and the client sees an incomplete body."""
        transport = self.request.transport
        if transport is not None:
            transport.close()
            self.loop.call_later(self.stall_s, transport.abort)  # one that reads nothing

    async def _send_file(self) -> web.StreamResponse:
        """The whole file, with its real length, written in pieces as the client takes
        them: no second copy in the connection's buffer, and a client that takes
        nothing is cut off like a stalled stream."""
        rate = self.rate or 22050
        header = wav_header(rate, len(self.whole)) if self.fmt == "wav" else b""
        headers = self._headers(rate)
        del headers["X-Accel-Buffering"]
        self.response = response = web.StreamResponse(headers=headers)
        response.content_length = len(header) + len(self.whole)
        bound_send_buffer(self.request.transport)
        await response.prepare(self.request)
        transport = self.request.transport
        if await paced(self._write_file(response, header), transport, self.stall_s, "HTTP client"):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        self.whole = bytearray()
        return response

    async def _write_file(self, response: web.StreamResponse, header: bytes) -> None:
        if header:
            await response.write(header)
        view = memoryview(self.whole)  # slices, not copies
        for start in range(0, len(view), FILE_PIECE):
            await response.write(view[start : start + FILE_PIECE])


def failure_of(event: Event) -> ApiError | None:
    """What an outcome that is not the audio asked for answers (None: it is)."""
    if event.name == "error":
        problem = str(event.fields.get("error", "synthesis failed"))
        if event.fields.get("code"):  # refused after admission (its voice would not load)
            return ApiError(400, problem, event.fields["code"])
        return ApiError(400 if "speakable" in problem else 500, problem, "synthesis_failed")
    if event.name == "stopped":
        reason = event.fields.get("reason", "stopped")
        if reason == "shutdown":
            return ApiError(503, "stopped: the daemon is shutting down", "shutting-down")
        return ApiError(500, f"stopped: {reason}", "synthesis_failed")
    return None
