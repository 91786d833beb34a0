"""The Wyoming frontend: Home Assistant's TTS protocol over TCP.

It only translates. Wyoming events become asks for the core; the core streams each
utterance's audio back into this connection (an `AudioOut`) and reports its outcome
through this connection (a `Sink`). The `wyoming` package does the event framing; this
module (with framing.py) adds what a server facing the network needs on top of it: a
clear `error` for a malformed or unfinished event instead of a silent hang-up, and bounds
on what a client may send and how long it may take.

On the wire, per request:
- `synthesize` → `audio-start`, `audio-chunk`s as they are decoded, `audio-stop`
  (an `error` before it if synthesis failed half way); refused: one `error`.
- `synthesize-start`, `synthesize-chunk`s, [`synthesize`, ignored], `synthesize-stop` →
  one `audio-start`, chunks from the first complete clause on (while text still
  arrives), `audio-stop`, then `synthesize-stopped`, which always ends the session
  (an `error` before it when the session failed). A session that ends before
  `synthesize-stop` (idle limit, failure, stop) is ended by the server: `synthesize-stopped`
  comes at once and the connection serves the next request; a late `synthesize-stop` is
  absorbed, late chunks are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.utterance import Ask, Event, Refused, Utterance, new_id
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event as WyEvent
from wyoming.info import Describe, Info
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from ..backpressure import bound_send_buffer, deliver
from ..base import Frontend, Host
from ..loop_thread import LoopThread
from .framing import BadFrame, read_event
from .info import build_info

log = logging.getLogger(__name__)

WIDTH, CHANNELS = 2, 1  # s16le mono, as the engine makes it
_connections = itertools.count(1)
# The `error` code of a request that ends badly; `finished` carries an error only for a
# stream that went idle without its end (limits.stream_idle_s): what came was spoken.
OUTCOME_CODES = {"error": "synthesis-failed", "stopped": "stopped", "finished": "stream-idle"}


class ClientGone(Exception):
    pass


@dataclass(eq=False)
class _Request:
    """One request on a connection, as the event loop sees it."""

    streamed: bool
    utterance: Utterance | None = None  # None: refused before the core took it
    client_done: bool = False  # synthesize-stop came (a one-shot is done at once)
    concluded: bool = False  # its outcome has been written to the client
    audio_started: bool = False
    # The server ended the session before synthesize-stop (idle, failed, stopped, or
    # refused at its start): until the client's stop or its next start, its late chunks,
    # its repeated full `synthesize` and its stop belong to a session already answered.
    server_ended: bool = False
    # The session's text as it came (memory only, at most a payload's worth): what its
    # repeated `synthesize` says, told apart from a new request once the server ended it.
    heard: str = ""

    def hear(self, text: str, limit: int) -> None:
        if len(self.heard) + len(text) <= limit:
            self.heard += text

    def repeats(self, text: str) -> bool:
        """Whether `text` is this session's text again (Home Assistant sends it whole
        after the chunks, for servers that do not stream)."""
        return " ".join(text.split()) == " ".join(self.heard.split())

    @property
    def over(self) -> bool:
        return self.concluded and self.client_done


class WyomingConnection(AsyncEventHandler):
    """One client connection; one request in flight at a time."""

    def __init__(
        self,
        server: WyomingFrontend,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        super().__init__(reader, writer)
        self.server = server
        self.core = server.core
        self.loop = asyncio.get_running_loop()
        self.number = next(_connections)
        self._request: _Request | None = None
        self._closed = False
        bound_send_buffer(writer.transport)

    # -- reading: vet each header before the wyoming package parses the event -----------

    async def run(self) -> None:
        try:
            while True:
                event = await read_event(
                    self.reader, self.server.max_event_bytes, self.server.read_timeout_s
                )
                if event is None or not await self.handle_event(event):
                    break
        except BadFrame as exc:
            log.warning("wyoming client %d: %s", self.number, exc)
            self.core.refused(self.server.name, exc.code)
            await self._error(str(exc), exc.code)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self.disconnect()
            self.writer.close()

    async def disconnect(self) -> None:
        self._closed = True
        request = self._request
        if request is not None and request.utterance is not None and not request.concluded:
            self.core.cancel(request.utterance, "client disconnected")

    # -- events in ---------------------------------------------------------------------------

    async def handle_event(self, event: WyEvent) -> bool:
        try:
            if Describe.is_type(event.type):
                await self.write_event(self.server.info().event())
            elif Synthesize.is_type(event.type):
                request = self._request
                if request is not None and request.streamed and not request.client_done:
                    pass  # inside a streaming session it repeats the streamed text: ignored
                elif (
                    request is not None
                    and request.server_ended
                    and request.repeats(_text(event, "synthesize", allow_empty=True))
                ):
                    pass  # the repeat of a session the server ended (and answered)
                else:
                    self._one_shot(event)
            elif SynthesizeStart.is_type(event.type):
                self._stream_start(event)
            elif SynthesizeChunk.is_type(event.type):
                self._stream_feed(_text(event, "synthesize-chunk", allow_empty=True), False)
            elif SynthesizeStop.is_type(event.type):
                await self._stream_stop()
            else:
                raise WyomingRefusal(f"unknown event type {event.type[:40]!r}", "unknown-event")
        except WyomingRefusal as exc:
            self.core.refused(self.server.name, exc.code)
            # the kind only: the reason may quote the request's text
            log.warning("wyoming client %d: request refused: %s", self.number, exc.code)
            await self._error(str(exc), exc.code)
            if exc.ends_session:  # a session refused at its start ends as the server's
                await self._write_safely(SynthesizeStopped().event())
        return True

    def _ask(self, event: WyEvent, source: str, text: str = "") -> Ask:
        voice = event.data.get("voice") or {}
        if not isinstance(voice, dict):
            raise WyomingRefusal('"voice" must be an object {name, speaker}', "bad-request")
        name, speaker = voice.get("name"), voice.get("speaker")
        if name is not None and not isinstance(name, str):
            raise WyomingRefusal("voice name must be a string", "bad-request")
        if speaker is not None and (
            isinstance(speaker, bool) or not isinstance(speaker, (str, int))
        ):
            raise WyomingRefusal("voice speaker must be a name or a number", "bad-request")
        return Ask(
            id=new_id("wyoming"),  # random: no other client can guess it
            text=text,
            source=source,
            voice=name,
            speaker=speaker,
        )

    def _begin(self, streamed: bool) -> _Request:
        if self._request is not None and not self._request.over:
            raise WyomingRefusal("a request is already in progress on this connection", "busy")
        self._request = _Request(streamed=streamed, client_done=not streamed)
        return self._request

    def _one_shot(self, event: WyEvent) -> None:
        ask = self._ask(event, "wyoming", _text(event, "synthesize"))
        request = self._begin(streamed=False)
        request.utterance = self._accepted(
            request, lambda: self.core.submit(ask, self, _AudioOut(self, request))
        )

    def _stream_start(self, event: WyEvent) -> None:
        ask = self._ask(event, "wyoming-stream")
        request = self._begin(streamed=True)
        try:
            request.utterance = self._accepted(
                request,
                lambda: self.core.feed_stream(ask, "", False, self, _AudioOut(self, request)),
            )
        except WyomingRefusal as exc:
            # Refused at its start, the session is the server's to end, at once: the
            # client's chunks, repeat and stop that follow are absorbed, its next
            # request served.
            request.client_done = request.server_ended = True
            exc.ends_session = True
            raise

    def _in_session(self, name: str) -> _Request:
        request = self._request
        if request is not None and request.server_ended:
            return request  # a late event of a session the server ended (the client was told)
        if request is None or not request.streamed or request.client_done:
            raise WyomingRefusal(
                f"{name} outside a synthesize-start … synthesize-stop session", "no-session"
            )
        return request

    def _stream_feed(self, text: str, final: bool) -> None:
        request = self._in_session("synthesize-chunk")
        request.hear(text, self.server.max_event_bytes)
        utterance = request.utterance
        if request.concluded or utterance is None or utterance.outcome is not None:
            return  # the session already has its outcome (the client was told)
        try:
            self.core.feed_stream(utterance.ask, text, final, self)
        except Refused as exc:
            if utterance.outcome is None:  # a bad piece: what came before is still spoken
                raise WyomingRefusal(str(exc), exc.code) from None

    async def _stream_stop(self) -> None:
        request = self._in_session("synthesize-stop")
        if request.server_ended:  # answered already: synthesize-stopped went out at its end
            request.server_ended = False
            return
        request.client_done = True
        if request.concluded:
            await self._write_safely(SynthesizeStopped().event())
            return
        utterance = request.utterance
        if utterance is not None and utterance.outcome is None:
            with contextlib.suppress(Refused):  # concluded meanwhile: _conclude ends it
                self.core.feed_stream(utterance.ask, "", True, self)

    def _accepted(self, request: _Request, call: Callable[[], Utterance]) -> Utterance | None:
        try:
            return call()
        except Refused as exc:
            request.concluded = True  # the error below is this request's outcome
            raise WyomingRefusal(str(exc), exc.code) from None

    # -- out: audio from a synthesis thread, outcome from the core -----------------------------

    def write_audio(self, request: _Request, pcm: np.ndarray, sample_rate: int) -> bool:
        if self._closed:
            return False
        send = self._send_audio(request, pcm, sample_rate)
        who = f"wyoming client {self.number}"
        return deliver(self.loop, send, self.server.stall_s, self.writer.transport, who)

    async def _send_audio(self, request: _Request, pcm: np.ndarray, rate: int) -> None:
        if self._closed or self.writer.is_closing():
            raise ClientGone
        if not request.audio_started:
            request.audio_started = True
            await self.write_event(AudioStart(rate=rate, width=WIDTH, channels=CHANNELS).event())
        data = pcm.astype("<i2").tobytes()
        await self.write_event(
            AudioChunk(rate=rate, width=WIDTH, channels=CHANNELS, audio=data).event()
        )

    def report(self, utterance: Utterance, event: Event) -> None:
        """The core's events (the Sink; called from a core thread)."""
        if event.terminal:
            asyncio.run_coroutine_threadsafe(self._conclude(utterance, event), self.loop)

    async def _conclude(self, utterance: Utterance, event: Event) -> None:
        request = self._request
        if request is None or request.utterance is not utterance:
            return  # an older request's outcome on a connection that moved on
        request.concluded = True
        if request.streamed and not request.client_done:  # ended before synthesize-stop
            request.client_done = request.server_ended = True
        problem = event.fields.get("error")
        if event.name == "stopped":
            problem = f"stopped: {event.fields.get('reason', 'stopped')}"
        if problem:
            code = event.fields.get("code") or OUTCOME_CODES[event.name]
            await self._error(str(problem), code)
        if request.audio_started:
            await self._write_safely(AudioStop().event())
        if request.streamed and request.client_done:
            await self._write_safely(SynthesizeStopped().event())

    async def _error(self, text: str, code: str) -> None:
        await self._write_safely(Error(text=text, code=code).event())

    async def _write_safely(self, event: WyEvent) -> None:
        if self._closed or self.writer.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            await self.write_event(event)


class WyomingRefusal(Exception):
    """A request answered with an `error` event; the connection goes on."""

    def __init__(self, text: str, code: str) -> None:
        super().__init__(text)
        self.code = code
        self.ends_session = False  # a synthesize-start refused: synthesize-stopped follows


def _text(event: WyEvent, name: str, allow_empty: bool = False) -> str:
    text = event.data.get("text")
    if not isinstance(text, str):
        raise WyomingRefusal(f'{name} needs "text" as a string', "bad-request")
    if not allow_empty and not text.strip():
        raise WyomingRefusal("text is empty", "empty-text")
    return text


class _AudioOut:
    """The core's AudioOut for one request: PCM into this connection."""

    def __init__(self, connection: WyomingConnection, request: _Request) -> None:
        self.connection = connection
        self.request = request

    def write(self, pcm: Any, sample_rate: int) -> bool:
        return self.connection.write_audio(self.request, pcm, sample_rate)


class WyomingFrontend(Frontend):
    """The Wyoming TCP server, on its own event loop thread."""

    name = "wyoming"

    def __init__(self, config: Config, host: Host) -> None:
        super().__init__(config, host)
        self.core = host.core
        self.stall_s = config.limits.client_stall_s
        self.max_event_bytes = config.limits.max_payload_bytes
        self.read_timeout_s = config.limits.client_read_timeout_s
        self._loop = LoopThread("magpie-wyoming")
        self._server: AsyncTcpServer | None = None
        self._zeroconf: Any = None

    @classmethod
    def enabled(cls, config: Config) -> bool:
        return config.wyoming.enabled

    def info(self) -> Info:
        return build_info(self.host.catalogue(), self.host.version)

    def start(self) -> None:
        """Listen now (a port in use fails the start, with the reason)."""
        section = self.config.wyoming
        self._server = AsyncTcpServer(section.host, section.port)
        listen = self._server.start(partial(WyomingConnection, self))
        self._loop.start(listen, f"Wyoming {section.host}:{section.port}")
        log.info("Wyoming server on tcp://%s:%d", section.host, section.port)
        if advertise(section.zeroconf, section.host):
            self._zeroconf = self._register_zeroconf()

    def stop(self) -> None:
        if self._server is None:
            return
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                self._zeroconf.unregister_all_services()
                self._zeroconf.close()
        self._loop.stop(self._server.stop)

    def _register_zeroconf(self) -> Any:
        from .mdns import register_wyoming

        section = self.config.wyoming
        try:
            return register_wyoming(section.host, section.port, section.name)
        except Exception as exc:  # discovery is a convenience: serve without it
            log.warning("zeroconf: not advertised (%s); add the server in HA by host/port", exc)
            return None


def advertise(setting: str, host: str) -> bool:
    if setting != "auto":
        return setting == "on"
    return not _is_loopback(host)


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "::1"):
        return True
    try:
        return socket.inet_aton(host)[0] == 127
    except OSError:
        return False
