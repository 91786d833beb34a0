"""One HTTP speech response: audio from a synthesis thread (the core's AudioOut), the
outcome from the core (its Sink), streamed as it is decoded or sent as one file, in the
format and rate asked for (../encoding: encoded on the synthesis thread, chunk by chunk).

A streamed WAV has a header of unknown length: RIFF and data sizes 0xFFFFFFFF; a whole
WAV file states its length.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from typing import Any

import numpy as np
from aiohttp import web
from magpie_tts.daemon.core.utterance import Event, Utterance

from ..backpressure import bound_send_buffer, deliver, paced
from ..encoding import CONTENT_TYPES, AudioOutput, WholeAudio, open_output, output_rate, wav_header
from .fields import ApiError, error_response

FILE_PIECE = 64 * 1024  # a whole file goes out in pieces of this size
DEFAULT_RATE = 22050  # a whole file's rate when no audio was made to tell it


class OutcomeSink:
    """A Sink that resolves `outcome` with the terminal event, on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.notes: list[str] = []
        self.outcome: asyncio.Future[Event] = loop.create_future()

    def report(self, utterance: Utterance, event: Event) -> None:  # from a core thread
        if event.name == "queued":  # reported in submit, before any audio
            self.notes = event.fields.get("notes", [])
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
        sample_rate: int | None = None,  # None: the voice's own (checked by the caller)
        timestamps: bool = False,  # SSE word events; a whole file: captioned JSON
    ) -> None:
        self.request = request
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.stream_format = stream_format
        self.stall_s = stall_s
        super().__init__(asyncio.get_running_loop())
        self.response: web.StreamResponse | None = None
        self.output: AudioOutput | None = None  # opened with the first chunk (its rate)
        self.kept = WholeAudio(max_file_s)  # a whole file's audio (stream_format None)
        self.refusal: ApiError | None = None
        self.timestamps = timestamps
        self.timed: list[dict[str, Any]] = []  # word/mark events not yet sent (or all: JSON)

    def refuse(self, error: ApiError) -> None:
        """This request cannot be answered with its audio (a bad piece of its text, a
        file over the limit): its answer is this error, whatever was made."""
        if self.refusal is None:
            self.refusal = error

    def words(self, words: list[Any]) -> None:  # AudioOut's optional part (core/client.py)
        """A chunk's word timings (engine WordTime), sent before its audio."""
        if self.timestamps:
            self.timed += [timing_event(w) for w in words]

    # AudioOut: called from a synthesis thread; blocks while the client catches up.
    # Encoding happens here, on that thread, so the event loop only sends bytes.
    def write(self, pcm: np.ndarray, sample_rate: int) -> bool:
        first = self.output is None
        if first:
            # a whole WAV is PCM behind a header stating its length, written at the end
            fmt = "pcm" if self.fmt == "wav" and self.stream_format is None else self.fmt
            self.output = open_output(fmt, sample_rate, self.sample_rate)
        if self.stream_format is None:
            return self._keep(pcm, sample_rate)
        data = self.output.write(pcm.astype("<i2").tobytes())
        timed, self.timed = self.timed, []
        if not data and not first and not timed:
            return True  # the codec is filling a frame: nothing to send yet
        send = self._send(data, timed)
        return deliver(self.loop, send, self.stall_s, self.request.transport, "HTTP client")

    def _keep(self, pcm: np.ndarray, rate: int) -> bool:
        """A whole file's audio, encoded as it comes and kept until the end."""
        assert self.output is not None
        if self.kept.keep(self.output, pcm, rate):
            return True
        self.refuse(
            ApiError(
                413,
                f"the whole file would be over {self.kept.max_s:g} s of audio: "
                'ask for a stream ("stream": true, /tts/stream or /v1/audio/speech)',
                "too-long",
            )
        )
        return False  # ends the synthesis

    async def _send(self, data: bytes, timed: list[dict[str, Any]] | None = None) -> None:
        if self.response is None:
            self.response = await self._start()
        for event in timed or ():  # words before (or with) the audio they describe
            await self.response.write(f"data: {json.dumps(event)}\n\n".encode())
        if not data:
            return
        if self.stream_format == "sse":
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
            data = f"data: {json.dumps(event)}\n\n".encode()
        await self.response.write(data)

    def _rate(self) -> int:
        """The rate of the audio sent (no audio at all: the rate it would have had)."""
        if self.output is not None:
            return self.output.rate
        return output_rate(self.fmt, DEFAULT_RATE, self.sample_rate)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": CONTENT_TYPES[self.fmt],
            "X-Sample-Rate": str(self._rate()),
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # proxies: pass audio on as it comes
        }
        if self.stream_format == "sse":
            headers["Content-Type"] = "text/event-stream"
            headers["X-Audio-Content-Type"] = CONTENT_TYPES[self.fmt]  # what the deltas hold
        if self.fmt in ("wav", "pcm"):
            headers["X-Audio-Format"] = "s16le; channels=1"
        if self.notes:  # SSML asked for, without effect (tag names, never the text)
            headers["X-SSML-Notes"] = "; ".join(self.notes)
        return headers

    async def _start(self) -> web.StreamResponse:
        response = web.StreamResponse(headers=self._headers())
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
            if self.timestamps:
                return self._captioned()
            return await self._send_file()
        # A text body that went idle before its end (`warning`) was not all said: cut
        # short, like a failure, whatever the client does with the bytes so far.
        if self.stream_format == "audio" and (failure is not None or warning):
            self._abort()
            return self.response
        with contextlib.suppress(ConnectionError, RuntimeError):
            assert self.output is not None
            tail = self.output.finish()  # the encoder's last frames
            if tail:
                await self._send(tail)
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

    def _captioned(self) -> web.Response:
        """The whole file and its words in one JSON (like Kokoro's captioned speech)."""
        if self.output is not None:
            self.kept.data += self.output.finish()
        header = wav_header(self._rate(), len(self.kept.data)) if self.fmt == "wav" else b""
        body = {
            "audio": base64.b64encode(header + bytes(self.kept.data)).decode(),
            "content_type": CONTENT_TYPES[self.fmt],
            "sample_rate": self._rate(),
            "words": [e for e in self.timed if e["type"] == "speech.word"],
            "marks": [e for e in self.timed if e["type"] == "speech.mark"],
        }
        self.kept.data = bytearray()
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    async def _send_file(self) -> web.StreamResponse:
        """The whole file, with its real length, written in pieces as the client takes
        them: no second copy in the connection's buffer, and a client that takes
        nothing is cut off like a stalled stream."""
        if self.output is not None:
            self.kept.data += self.output.finish()
        header = b""
        if self.fmt == "wav":
            header = wav_header(self._rate(), len(self.kept.data))
        headers = self._headers()
        del headers["X-Accel-Buffering"]
        self.response = response = web.StreamResponse(headers=headers)
        response.content_length = len(header) + len(self.kept.data)
        bound_send_buffer(self.request.transport)
        await response.prepare(self.request)
        transport = self.request.transport
        if await paced(self._write_file(response, header), transport, self.stall_s, "HTTP client"):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        self.kept.data = bytearray()
        return response

    async def _write_file(self, response: web.StreamResponse, header: bytes) -> None:
        if header:
            await response.write(header)
        view = memoryview(self.kept.data)  # slices, not copies
        for start in range(0, len(view), FILE_PIECE):
            await response.write(view[start : start + FILE_PIECE])


def timing_event(word: Any) -> dict[str, Any]:
    """A WordTime as an SSE event: `speech.word` {word, start, end} or `speech.mark`
    {name, time}; seconds from the start of the response's audio."""
    if word.kind == "mark":
        return {"type": "speech.mark", "name": word.word, "time": round(word.start, 3)}
    start, end = round(word.start, 3), round(word.end, 3)
    return {"type": "speech.word", "word": word.word, "start": start, "end": end}


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
