"""The HTTP frontend (aiohttp): the OpenAI speech API, `/tts`, `/v1/say`, `/health` and
`/metrics`.

It only translates (the frontend contract, ../base.py): a request becomes an ask for the
core; audio the core makes for it comes back through an `AudioOut` into the response,
its outcome through a `Sink`.
Audio is streamed as it is decoded (chunked transfer) unless a whole file is asked for.
A streamed WAV has a header of unknown length: RIFF and data sizes 0xFFFFFFFF.

It answers while the voice loads, so `/health` can say "loading" (503) until the daemon
is ready; every other route answers 503 until then as well.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.core import Core
from magpie_tts.daemon.core.utterance import PRIORITIES, Ask, Refused, Utterance, new_id

from ..base import Frontend, Host
from ..loop_thread import LoopThread
from . import fields
from .audio import AudioResponse, OutcomeSink
from .fields import OPENAI_VOICES, ApiError, error_response
from .guard import Guard
from .health import HealthRoutes
from .websocket import SpeechSocket

log = logging.getLogger(__name__)

OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
STATUS_OF = {  # Refused.code → HTTP status
    "too-long": 413,
    "busy": 429,
    "shutting-down": 503,
}


def refusal(exc: Refused) -> ApiError:
    """The core's refusal as an HTTP error (a 429 says when to try again)."""
    return ApiError(STATUS_OF.get(exc.code, 400), str(exc), exc.code, retry_after=exc.retry_after)


# -- the server ---------------------------------------------------------------------------


class HttpFrontend(Frontend):
    name = "http"
    answers_while_loading = True  # /health says "loading" while the voice loads

    def __init__(self, config: Config, host: Host) -> None:
        super().__init__(config, host)
        self.guard = Guard(config)  # origin, body type and time, key, per-client budget
        self._loop = LoopThread("magpie-http")
        self._runner: web.AppRunner | None = None
        self._sockets = 0  # open speech WebSockets

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def enabled(cls, config: Config) -> bool:
        return config.http.enabled

    def start(self) -> None:
        """Listen now (before the voice loads, so /health can say so)."""
        section = self.config.http
        # keepalive_timeout: aiohttp closes a connection with no complete request head this
        # long after it opened or its last response ended: the header timeout (slow-loris),
        # and idle keep-alive. handler_cancellation: a client that hangs up cancels its
        # handler, which ends its utterance (`_speak`), whole-file answers included
        # (aiohttp's default runs a handler to its end; its test server cancels, as here).
        self._runner = web.AppRunner(
            self.application(),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=section.header_timeout_s,
            handler_cancellation=True,
        )
        self._loop.start(
            self._listen(section.host, section.port), f"HTTP {section.host}:{section.port}"
        )
        log.info("HTTP server on http://%s:%d", section.host, section.port)

    def application(self) -> web.Application:
        """The routes (served by start, or by aiohttp's test server in-process)."""
        app = web.Application(
            client_max_size=self.config.limits.max_payload_bytes,
            middlewares=[self._errors, self.guard.middleware],
        )
        app.on_response_prepare.append(self.guard.cors_headers)
        app.add_routes(
            [
                web.post("/v1/audio/speech", self.openai_speech),
                web.post("/v1/audio/speech/captioned", self.captioned_speech),
                web.post("/dev/captioned_speech", self.captioned_speech),  # Kokoro's path
                web.get("/v1/audio/speech/ws", self.speech_socket),
                web.get("/v1/audio/voices", self.voices),
                web.get("/v1/models", self.models),
                web.post("/tts", self.tts),
                web.post("/tts/stream", self.tts_stream),
                web.post("/v1/say", self.say),
                web.post("/v1/stop", self.stop_speech),
                *HealthRoutes(self.host).routes(),
            ]
        )
        return app

    async def _listen(self, host: str, port: int) -> None:
        assert self._runner is not None
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    def stop(self) -> None:
        if self._runner is not None:
            self._loop.stop(self._runner.cleanup)

    # -- shared checks ---------------------------------------------------------------------

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            self._count_refusal(exc.code)
            self.guard.log_refusal(request, exc)
            return error_response(exc.status, str(exc), exc.code, exc.headers)
        except web.HTTPRequestEntityTooLarge:
            self._count_refusal("too-long")
            limit = self.config.limits.max_payload_bytes
            return error_response(413, f"request body over {limit} bytes", "too-long")
        except web.HTTPException as exc:
            if exc.status >= 400:  # 404, 405 (with its Allow), …
                allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
                return error_response(exc.status, exc.reason, "http_error", allow)
            raise

    def _count_refusal(self, code: str) -> None:
        if self.host.ready:
            self.host.core.refused(self.name, code)

    def refused(self, request: web.Request, exc: ApiError) -> None:
        """A refusal answered inside a response (a WebSocket's `Error`): counted, logged."""
        self._count_refusal(exc.code)
        self.guard.log_refusal(request, exc)

    def _ready(self, request: web.Request) -> Core:
        """The core, once the daemon is ready and the request may use it."""
        if not self.host.ready:
            raise ApiError(503, "loading: the voice is not ready yet", "loading")
        self.guard.authenticate(request)
        return self.host.core

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=fields.no_constant)
        except UnicodeDecodeError:
            raise ApiError(400, "request body is not valid UTF-8", "bad_json") from None
        except (ValueError, RecursionError) as exc:
            raise ApiError(400, f"request body is not valid JSON: {exc}", "bad_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_json")
        return data

    # -- speech ------------------------------------------------------------------------------

    async def captioned_speech(self, request: web.Request) -> web.StreamResponse:
        """The OpenAI request, answered as one JSON: audio (base64) and its words."""
        return await self.openai_speech(request, captioned=True)

    async def openai_speech(
        self, request: web.Request, captioned: bool = False
    ) -> web.StreamResponse:
        core = self._ready(request)
        data = await self._json(request)
        text = fields.string(data, "input", required=True)
        voice = fields.voice(fields.string(data, "voice"))
        model = fields.string(data, "model")
        if model is not None and model not in OPENAI_MODELS and model != "magpie":
            log.debug("model %r: served by the configured voice", model)
        # mp3 by default, as OpenAI documents; `sample_rate` is Magpie's extension
        fmt, rate = fields.audio_output(data, "response_format", "mp3")
        stream_format: str | None = None
        if not captioned:
            stream_format = fields.choice(data, "stream_format", ("audio", "sse"), "audio")
        timestamps = captioned or fields.flag(data, "timestamps")
        if timestamps and stream_format == "audio":
            raise ApiError(
                400,
                '"timestamps" come as SSE events ("stream_format": "sse") or with the '
                "whole file from /v1/audio/speech/captioned",
                "bad_request",
            )
        ask = Ask(
            id=new_id("http"),
            text=text,
            source="http",
            voice=voice,
            speed=fields.speed(data),
            custom_dictionary=fields.string(data, "custom_dictionary"),
        )
        return await self._speak(
            request, core, ask, (fmt, rate), stream_format, timestamps=timestamps
        )

    async def tts(self, request: web.Request) -> web.StreamResponse:
        return await self._tts(request, always_stream=False)

    async def tts_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._tts(request, always_stream=True)

    async def _tts(self, request: web.Request, always_stream: bool) -> web.StreamResponse:
        core = self._ready(request)
        if request.content_type == "text/plain":  # the body is the text, as it arrives
            options: dict[str, Any] = dict(request.query)
            if "speed" in options:
                options["speed"] = fields.number_text(options["speed"], "speed")
            streamed = True
        else:
            options, streamed = await self._json(request), False
        # wav by default, as /tts has always answered
        output = fields.audio_output(options, "response_format", "wav", query=streamed)
        stream = always_stream or fields.flag(options, "stream", query=streamed)
        speaker = fields.speaker(options)
        ask = Ask(
            id=new_id("http"),
            text="" if streamed else fields.string(options, "text", required=True),
            source="http-stream" if streamed else "http",
            voice=fields.voice(fields.string(options, "voice")),
            speed=fields.speed(options),
            speaker=speaker,
            custom_dictionary=fields.string(options, "custom_dictionary"),
        )
        return await self._speak(
            request, core, ask, output, "audio" if stream else None, text_body=streamed
        )

    async def _speak(
        self,
        request: web.Request,
        core: Core,
        ask: Ask,
        output: tuple[str, int | None],  # the format and sample rate (None: the voice's)
        stream_format: str | None,
        text_body: bool = False,
        timestamps: bool = False,
    ) -> web.StreamResponse:
        stall_s, max_file_s = self.config.limits.client_stall_s, self.config.http.max_file_audio_s
        fmt, rate = output
        reply = AudioResponse(request, fmt, stream_format, stall_s, max_file_s, rate, timestamps)
        try:
            with self.guard.budget(request):
                if text_body:
                    utterance = core.feed_stream(ask, "", False, reply, reply)
                else:
                    utterance = core.submit(ask, reply, reply)
        except Refused as exc:
            raise refusal(exc) from None
        reader = None
        if text_body:
            reader = asyncio.ensure_future(self._feed_body(request, core, utterance, reply))
        try:
            event = await reply.outcome
        except asyncio.CancelledError:  # the handler was cancelled: the client left
            core.cancel(utterance, "client disconnected")
            raise
        finally:
            if reader is not None:
                reader.cancel()
        return await reply.finish(event)

    async def speech_socket(self, request: web.Request) -> web.StreamResponse:
        """The speech WebSocket (websocket.py). Each open socket may hold a stream, so
        no more are open at once than the core has streams, making audio or waiting."""
        core = self._ready(request)
        limits = self.config.limits
        if self._sockets >= core.slots.max_streams + limits.max_waiting_streams:
            raise ApiError(429, "too many speech WebSockets open: try again later", "busy")
        socket = SpeechSocket(self, request, core)  # its options checked: 400 before upgrade
        self._sockets += 1
        try:
            return await socket.serve()
        finally:
            self._sockets -= 1

    async def _feed_body(
        self, request: web.Request, core: Core, utterance: Utterance, reply: AudioResponse
    ) -> None:
        """Streamed text in: each body chunk is a piece of the text (UTF-8, any split).
        A piece that cannot be spoken (not UTF-8, a control character, markup, past the
        length limit) or a body that breaks off fails the request, and the client is
        told (see AudioResponse); it never ends early as if all had been said."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            async for chunk in request.content.iter_any():
                core.feed(utterance, decoder.decode(chunk), False)
            core.feed(utterance, decoder.decode(b"", final=True), True)
            return
        except UnicodeDecodeError as exc:
            problem = ApiError(400, f"text is not valid UTF-8 ({exc.reason})", "bad-text")
        except Refused as exc:
            assert utterance.stream is not None
            if utterance.stream.closed:  # ended by the core (idle, stalled): it answers
                return
            problem = refusal(exc)
        except ConnectionError:  # the client left: its handler is cancelled, which ends it
            return
        except Exception as exc:  # the body broke off (a malformed chunk)
            problem = ApiError(400, f"text body could not be read: {exc}", "bad_request")
        self._count_refusal(problem.code)
        self.guard.log_refusal(request, problem)  # its kind: the reason may quote the text
        reply.refuse(problem)
        core.cancel(utterance, f"refused: {problem.code}")

    # -- the speaker -------------------------------------------------------------------------

    async def say(self, request: web.Request) -> web.StreamResponse:
        core = self._ready(request)
        data = await self._json(request)
        priority = fields.choice(data, "priority", tuple(PRIORITIES), "normal")
        request_id = fields.request_id(data)
        volume = data.get("volume", 1.0)
        if not fields.finite(volume) or not 0.0 <= volume <= 2.0:
            raise ApiError(400, "volume must be a number in 0..2", "bad_request")
        ask = Ask(
            id=request_id or new_id("http-say"),
            text=fields.string(data, "text", required=True),
            source="http-say",
            voice=fields.voice(fields.string(data, "voice")),
            speed=fields.speed(data),
            volume=float(volume),
            priority=priority,
            cacheable=fields.flag(data, "cache"),
        )
        wait = fields.flag(data, "wait")
        waiter = OutcomeSink(asyncio.get_running_loop())
        try:
            with self.guard.budget(request):
                core.submit(ask, waiter)
        except Refused as exc:
            raise refusal(exc) from None
        if not wait:
            return web.json_response({"id": ask.id, "event": "queued"}, status=202)
        event = await waiter.outcome
        status = 200 if event.name == "finished" else (500 if event.name == "error" else 409)
        if event.fields.get("code"):  # refused after admission (its voice did not load)
            status = 400
        return web.json_response({"id": ask.id, "event": event.name, **event.fields}, status=status)

    async def stop_speech(self, request: web.Request) -> web.StreamResponse:
        core = self._ready(request)
        data = await self._json(request) if await request.read() else {}
        request_id = data.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise ApiError(400, "id must be a string", "bad_request")
        stopped = core.stop(self.name, request_id)  # the speaker's, never a client's stream
        if request_id is not None and not stopped:
            raise ApiError(
                404, f"no utterance with id {request_id!r} is queued or speaking", "unknown_id"
            )
        return web.json_response({"stopped": stopped})

    # -- information ---------------------------------------------------------------------------

    async def voices(self, request: web.Request) -> web.StreamResponse:
        self._ready(request)
        voices = [
            {
                "name": v.name,
                "language": v.language,
                "sample_rate": v.sample_rate,
                "speakers": list(v.speakers),
            }
            for v in self.host.catalogue()
        ]
        return web.json_response({"voices": voices, "aliases": sorted({*OPENAI_VOICES, "default"})})

    async def models(self, request: web.Request) -> web.StreamResponse:
        self._ready(request)
        created = int(time.time())
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": model, "object": "model", "created": created, "owned_by": "magpie-tts"}
                    for model in (*OPENAI_MODELS, "magpie")
                ],
            }
        )
