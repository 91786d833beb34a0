"""The HTTP frontend (aiohttp): the OpenAI speech API, `/tts`, `/v1/say`, `/health` and
`/metrics`.

It only translates: a request becomes an ask for the core; audio the core makes for it
comes back through an `AudioOut` into the response, its outcome through a `Sink`.
Audio is streamed as it is decoded (chunked transfer) unless a whole file is asked for.
A streamed WAV has a header of unknown length: RIFF and data sizes 0xFFFFFFFF.

The server starts before the voice loads, so `/health` can say "loading" (503) until
the daemon is ready; every other route answers 503 until then as well.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import collections
import contextlib
import hmac
import json
import logging
import math
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from .backpressure import bound_send_buffer, deliver
from .config import Config
from .metrics import CONTENT_TYPE
from .utterance import PRIORITIES, Ask, Event, Refused, Utterance

if TYPE_CHECKING:
    from .service import Service

log = logging.getLogger(__name__)

OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable onyx nova sage shimmer verse marin cedar".split()
)
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
FORMATS = ("wav", "pcm")
UNKNOWN_SIZE = 0xFFFFFFFF
STATUS_OF = {  # Refused.code → HTTP status
    "too-long": 413,
    "busy": 429,
    "shutting-down": 503,
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def error_response(status: int, message: str, code: str) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return web.json_response(body, status=status)


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


class ClientRates:
    """Accepted requests per client address per sliding minute."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._seen: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            times = self._seen.setdefault(client, collections.deque())
            while times and now - times[0] > 60:
                times.popleft()
            if len(times) >= self.per_minute:
                return False
            times.append(now)
            if len(self._seen) > 10_000:  # forget idle clients
                for key in [k for k, v in self._seen.items() if not v]:
                    del self._seen[key]
            return True


# -- one response: audio from a synthesis thread, outcome from the core ---------------------


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


# -- the server ---------------------------------------------------------------------------


class HttpServer:
    def __init__(self, config: Config, version: str) -> None:
        self.config = config
        self.version = version
        self.service: Service | None = None
        self.api_key = config.http.resolved_api_key()
        self.rates = ClientRates(config.http.rate_per_minute)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._requests = 0
        self._lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Listen now (before the voice loads, so /health can say so)."""
        section = self.config.http
        self._loop = asyncio.new_event_loop()
        app = web.Application(
            client_max_size=self.config.limits.max_payload_bytes,
            middlewares=[self._errors],
        )
        app.add_routes(
            [
                web.post("/v1/audio/speech", self.openai_speech),
                web.get("/v1/audio/voices", self.voices),
                web.get("/v1/models", self.models),
                web.post("/tts", self.tts),
                web.post("/tts/stream", self.tts_stream),
                web.post("/v1/say", self.say),
                web.post("/v1/stop", self.stop_speech),
                web.get("/health", self.health),
                web.get("/metrics", self.metrics),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        try:
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, section.host, section.port)
            self._loop.run_until_complete(site.start())
        except OSError as exc:
            self._loop.close()
            raise OSError(f"HTTP: cannot listen on {section.host}:{section.port}: {exc}") from exc
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="magpie-http", daemon=True
        )
        self._thread.start()
        log.info("HTTP server on http://%s:%d", section.host, section.port)

    def attach(self, service: Service) -> None:
        """The daemon is ready: serve requests."""
        self.service = service

    def stop(self) -> None:
        if self._loop is None or self._runner is None or self._loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=3)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(3)

    # -- shared checks ---------------------------------------------------------------------

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            self._count_refusal(exc.code)
            log.warning("HTTP %s %s: %d %s", request.method, request.path, exc.status, exc)
            return error_response(exc.status, str(exc), exc.code)
        except web.HTTPRequestEntityTooLarge:
            self._count_refusal("too-long")
            limit = self.config.limits.max_payload_bytes
            return error_response(413, f"request body over {limit} bytes", "too-long")
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error_response(exc.status, exc.reason, "http_error")
            raise

    def _count_refusal(self, code: str) -> None:
        if self.service is not None:
            self.service.refused("http", code)

    def _ready(self, request: web.Request) -> Service:
        service = self.service
        if service is None:
            raise ApiError(503, "loading: the voice is not ready yet", "loading")
        if self.api_key is not None:
            given = request.headers.get("Authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self.api_key.encode()
            ):
                raise ApiError(401, "missing or wrong API key (Authorization: Bearer …)", "auth")
        client = request.remote or "?"
        if not self.rates.take(client):
            limit = self.config.http.rate_per_minute
            raise ApiError(429, f"rate limit: more than {limit} requests per minute", "busy")
        return service

    def _id(self, prefix: str) -> str:
        with self._lock:
            self._requests += 1
            return f"{prefix}-{self._requests}"

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError:
            raise ApiError(400, "request body is not valid UTF-8", "bad_json") from None
        except (ValueError, RecursionError) as exc:
            raise ApiError(400, f"request body is not valid JSON: {exc}", "bad_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "request body must be a JSON object", "bad_json")
        return data

    # -- speech ------------------------------------------------------------------------------

    async def openai_speech(self, request: web.Request) -> web.StreamResponse:
        service = self._ready(request)
        data = await self._json(request)
        text = _string(data, "input", required=True)
        voice = _voice(service, _string(data, "voice"))
        model = _string(data, "model")
        if model is not None and model not in OPENAI_MODELS and model != "magpie":
            log.debug("model %r: served by the configured voice", model)
        fmt = _choice(data, "response_format", FORMATS, "wav")
        stream_format = _choice(data, "stream_format", ("audio", "sse"), "audio")
        ask = Ask(id=self._id("http"), text=text, source="http", voice=voice, speed=_speed(data))
        return await self._speak(request, service, ask, fmt, stream_format)

    async def tts(self, request: web.Request) -> web.StreamResponse:
        return await self._tts(request, always_stream=False)

    async def tts_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._tts(request, always_stream=True)

    async def _tts(self, request: web.Request, always_stream: bool) -> web.StreamResponse:
        service = self._ready(request)
        if request.content_type == "text/plain":  # the body is the text, as it arrives
            options: dict[str, Any] = dict(request.query)
            if "speed" in options:
                options["speed"] = _number_text(options["speed"], "speed")
            streamed = True
        else:
            options, streamed = await self._json(request), False
        fmt = _choice(options, "response_format", FORMATS, "wav")
        stream = always_stream or _flag(options, "stream")
        speaker = options.get("speaker_id", options.get("speaker"))
        if speaker is not None and (
            isinstance(speaker, bool) or not isinstance(speaker, (int, str))
        ):
            raise ApiError(400, "speaker_id must be a number or a name", "bad_request")
        ask = Ask(
            id=self._id("http"),
            text="" if streamed else _string(options, "text", required=True),
            source="http-stream" if streamed else "http",
            voice=_voice(service, _string(options, "voice")),
            speed=_speed(options),
            speaker=speaker,
        )
        return await self._speak(
            request, service, ask, fmt, "audio" if stream else None, text_body=streamed
        )

    async def _speak(
        self,
        request: web.Request,
        service: Service,
        ask: Ask,
        fmt: str,
        stream_format: str | None,
        text_body: bool = False,
    ) -> web.StreamResponse:
        reply = AudioResponse(request, fmt, stream_format, self.config.limits.client_stall_s)
        core = service.core
        try:
            if text_body:
                utterance = core.feed_stream(ask, "", False, reply, reply)
            else:
                utterance = core.submit(ask, reply, reply)
        except Refused as exc:
            raise ApiError(STATUS_OF.get(exc.code, 400), str(exc), exc.code) from None
        reader = asyncio.ensure_future(self._feed_body(request, core, ask)) if text_body else None
        try:
            event = await reply.outcome
        finally:
            if not reply.outcome.done():  # the handler was cancelled: the client left
                core.stop(utterance.id, reason="client disconnected")
            if reader is not None:
                reader.cancel()
        return await reply.finish(event)

    async def _feed_body(self, request: web.Request, core: Any, ask: Ask) -> None:
        """Streamed text in: each body chunk is a piece of the text (UTF-8, any split)."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        final = False
        try:
            async for chunk in request.content.iter_any():
                piece = decoder.decode(chunk)
                if piece:
                    core.feed_stream(ask, piece, False)
            core.feed_stream(ask, decoder.decode(b"", final=True), True)
            final = True
        except (UnicodeDecodeError, Refused) as exc:
            log.warning("HTTP streamed text refused: %s", exc)
        finally:
            if not final:  # a bad piece or a broken body: speak what came, then end
                with contextlib.suppress(Refused):
                    core.feed_stream(ask, "", True)

    # -- the speaker -------------------------------------------------------------------------

    async def say(self, request: web.Request) -> web.StreamResponse:
        service = self._ready(request)
        data = await self._json(request)
        priority = _choice(data, "priority", tuple(PRIORITIES), "normal")
        request_id = data.get("id")
        if request_id is not None and (not isinstance(request_id, str) or not request_id):
            raise ApiError(400, "id must be a non-empty string", "bad_request")
        volume = data.get("volume", 1.0)
        if not _finite(volume) or not 0.0 <= volume <= 2.0:
            raise ApiError(400, "volume must be a number in 0..2", "bad_request")
        ask = Ask(
            id=request_id[:128] if request_id else self._id("http-say"),
            text=_string(data, "text", required=True),
            source="http-say",
            voice=_voice(service, _string(data, "voice")),
            speed=_speed(data),
            volume=float(volume),
            priority=priority,
            cacheable=data.get("cache") is True,
        )
        waiter = OutcomeSink(asyncio.get_running_loop())
        try:
            service.core.submit(ask, waiter)
        except Refused as exc:
            raise ApiError(STATUS_OF.get(exc.code, 400), str(exc), exc.code) from None
        if not _flag(data, "wait"):
            return web.json_response({"id": ask.id, "event": "queued"}, status=202)
        event = await waiter.outcome
        status = 200 if event.name == "finished" else (500 if event.name == "error" else 409)
        return web.json_response({"id": ask.id, "event": event.name, **event.fields}, status=status)

    async def stop_speech(self, request: web.Request) -> web.StreamResponse:
        service = self._ready(request)
        data = await self._json(request) if await request.read() else {}
        request_id = data.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise ApiError(400, "id must be a string", "bad_request")
        stopped = service.core.stop(request_id)
        if request_id is not None and not stopped:
            raise ApiError(
                404, f"no utterance with id {request_id!r} is queued or speaking", "unknown_id"
            )
        return web.json_response({"stopped": stopped})

    # -- information ---------------------------------------------------------------------------

    async def voices(self, request: web.Request) -> web.StreamResponse:
        service = self._ready(request)
        voices = [
            {
                "name": v.name,
                "language": v.language,
                "sample_rate": v.sample_rate,
                "speakers": list(v.speakers),
            }
            for v in service.registry.catalogue()
        ]
        return web.json_response({"voices": voices, "aliases": sorted(OPENAI_VOICES)})

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

    async def health(self, request: web.Request) -> web.StreamResponse:
        service = self.service
        if service is None:
            return web.json_response({"state": "loading"}, status=503)
        status = service.status()
        body = {
            "state": "ready",
            "health": status["health"],
            "version": self.version,
            "provider": status["provider"],
            "precision": status["precision"],
            "selftest": status.get("selftest"),
        }
        if status["health"] != "ok" or not service.healthy:
            body["state"] = "degraded"
            body["degraded"] = status.get("degraded", "a worker thread is stuck")
            return web.json_response(body, status=503)
        return web.json_response(body)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        service = self.service
        if service is None:
            raise ApiError(503, "loading: the voice is not ready yet", "loading")
        return web.Response(body=service.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


# -- field checks: a clear 400 for each wrong value ------------------------------------------


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _string(data: dict[str, Any], key: str, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ApiError(400, f'"{key}" is required', "bad_request")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f'"{key}" must be a string', "bad_request")
    return value


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value not in allowed:
        raise ApiError(
            400,
            f'"{key}" must be one of {", ".join(allowed)} (got {str(value)[:40]!r})',
            "unsupported_format" if "format" in key else "bad_request",
        )
    return str(value)


def _speed(data: dict[str, Any]) -> float:
    value = data.get("speed", 1.0)
    if not _finite(value) or not 0.25 <= value <= 4.0:
        raise ApiError(400, '"speed" must be a number in 0.25..4', "bad_request")
    return float(value)


def _number_text(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ApiError(400, f'"{key}" must be a number', "bad_request") from None


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")  # a query string's spelling
    if not isinstance(value, bool):
        raise ApiError(400, f'"{key}" must be true or false', "bad_request")
    return value


def _voice(service: Service, name: str | None) -> str | None:
    """OpenAI's voice names mean the default voice; others are Magpie voice names."""
    if name is None or name in OPENAI_VOICES:
        return None
    return name
