"""The speech WebSocket, `/v1/audio/speech/ws`: text in as it is written, audio out as it
is made, on one connection, in the message shapes voice-agent frameworks use (Deepgram's).

Client → server (JSON text frames): `{"type": "Speak", "text": …}` pieces, `Flush` (speak
what was sent), `Clear` (stop and drop: barge-in), `Close` (flush, then close),
`KeepAlive`. Server → client: binary frames of audio in the format and rate chosen in
the query string, and JSON events: `Flushed` after a flush's audio, `Cleared`, `Warning`
and `Error` with a `code`.

Each flush is one utterance of the core, fed through its streamed-text path as /tts/stream
and Wyoming streaming are (`feed_stream`, then `feed` per piece, final on Flush), with the
same admission (key, per-address budget, stream slots), idle limit, stall rule and one
terminal outcome: `Flushed`, `Cleared`, or an `Error` (`Warning` `stream-idle` when text
stopped coming without a Flush; what came was spoken). Flushes are spoken one after
another: text sent after a Flush waits (in memory, bounded by the text limit) until the
audio before it is out. Each flush's audio is a complete file of its format.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import WSMsgType, web
from magpie_tts.daemon.core.utterance import Ask, Event, Refused, Utterance, new_id
from magpie_tts.engine import EngineError

from ..backpressure import bound_send_buffer, deliver
from ..encoding import AudioOutput, open_output
from . import fields
from .audio import OutcomeSink, failure_of
from .fields import ApiError

if TYPE_CHECKING:
    from magpie_tts.daemon.core.core import Core

    from .server import HttpFrontend

log = logging.getLogger(__name__)

FORMAT_ALIASES = {"linear16": "pcm"}  # Deepgram's name for raw 16-bit PCM
MAX_FLUSHES = 32  # flushes one socket may have waiting (their text is held in memory)


def socket_options(query: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The query string's choices and the name its format came under (`encoding`,
    Deepgram's, or `response_format`, as on the HTTP routes)."""
    options = dict(query)
    key = "encoding" if "encoding" in options else "response_format"
    chosen = options.get(key, "pcm")
    options[key] = FORMAT_ALIASES.get(chosen, chosen)
    if "speed" in options:
        options["speed"] = fields.number_text(options["speed"], "speed")
    speaker = options.get("speaker")
    if isinstance(speaker, str) and speaker.isdigit():
        options["speaker"] = int(speaker)
    return options, key


class SocketAudio:
    """One flush's AudioOut: encoded on the synthesis thread, sent as binary frames."""

    def __init__(self, socket: SpeechSocket) -> None:
        self.socket = socket
        self.output: AudioOutput | None = None
        self.dropped = False  # cleared: nothing more goes out

    def write(self, pcm: np.ndarray, sample_rate: int) -> bool:
        if self.dropped:
            return False
        if self.output is None:
            self.output = open_output(self.socket.fmt, sample_rate, self.socket.rate)
        data = self.output.write(pcm.astype("<i2").tobytes())
        if not data:
            return True
        sock = self.socket
        stall_s = sock.frontend.config.limits.client_stall_s
        return deliver(sock.loop, sock.send_audio(data), stall_s, sock.transport, "WebSocket")

    def tail(self) -> bytes:
        return b"" if self.output is None or self.dropped else self.output.finish()


@dataclass(eq=False)
class Segment:
    """The text of one flush: pieces held until it is its turn, then its utterance."""

    sequence: int
    pieces: list[str] = field(default_factory=list)
    flushed: bool = False
    cleared: bool = False
    utterance: Utterance | None = None
    sink: OutcomeSink | None = None
    audio: SocketAudio | None = None
    custom_dictionary: str | None = None  # from a Speak of this flush, over the socket's


class SpeechSocket:
    """One WebSocket connection: reads messages, speaks its flushes one at a time."""

    def __init__(self, frontend: HttpFrontend, request: web.Request, core: Core) -> None:
        self.frontend = frontend
        self.request = request
        self.core = core
        options, key = socket_options(dict(request.query))
        self.fmt, self.rate = fields.audio_output(options, key, "pcm", query=True)
        self.voice = fields.voice(fields.string(options, "voice"))
        self.speed = fields.speed(options)
        self.speaker = fields.speaker(options)
        self.custom_dictionary = fields.string(options, "custom_dictionary")
        try:  # a voice it cannot use: refused before the upgrade, like the other routes
            synth = core.registry.check(self.voice)
            if synth is not None:
                synth.voice.speaker_id(self.speaker)
        except EngineError as exc:
            raise ApiError(400, str(exc), "unknown-voice") from None
        self.loop = asyncio.get_running_loop()
        self.ws = web.WebSocketResponse(max_msg_size=frontend.config.limits.max_payload_bytes)
        self.transport: asyncio.BaseTransport | None = None
        self.segments: deque[Segment] = deque()  # [0]: the one speaking (or next)
        self.changed = asyncio.Event()
        self.sequence = 0

    # -- the connection -------------------------------------------------------------------

    async def serve(self) -> web.WebSocketResponse:
        await self.ws.prepare(self.request)
        self.transport = self.request.transport
        bound_send_buffer(self.transport)
        runner = asyncio.ensure_future(self._run())
        try:
            await self._read()
        finally:
            runner.cancel()
            for segment in self.segments:
                if segment.utterance is not None:
                    self.core.cancel(segment.utterance, "client disconnected")
            with contextlib.suppress(Exception):
                await self.ws.close()
        return self.ws

    async def _read(self) -> None:
        idle_s = self.frontend.config.limits.stream_idle_s
        while not self.ws.closed:
            try:
                message = await self.ws.receive(timeout=idle_s)
            except asyncio.TimeoutError:
                if self.segments:
                    continue  # audio is still being made or sent: not idle
                await self.event("Warning", code="idle", description=f"nothing for {idle_s:g} s")
                return
            if message.type == WSMsgType.TEXT:
                if await self._handle(message.data):
                    return
            elif message.type == WSMsgType.BINARY:
                await self.error("bad_message", "binary frames are not accepted: send JSON text")
            elif message.type == WSMsgType.ERROR:  # too large, malformed: aiohttp closes
                await self.error("bad_frame", f"frame refused: {message.data}")
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    async def _handle(self, raw: str) -> bool:
        """One client message; True when the connection is to end (Close)."""
        try:
            message = json.loads(raw, parse_constant=fields.no_constant)
        except (ValueError, RecursionError):
            await self.error("bad_json", "message is not valid JSON")
            return False
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "Speak":
            text, custom = message.get("text"), message.get("custom_dictionary")
            if not isinstance(text, str) or not isinstance(custom, (str, type(None))):
                await self.error("bad_request", '"text" and "custom_dictionary" must be strings')
            elif text:
                await self._speak(text, custom)
        elif kind == "Flush":
            await self._flush()
        elif kind == "Clear":
            await self._clear()
        elif kind == "Close":
            await self._flush()
            await self._drained()
            return True
        elif kind != "KeepAlive":
            await self.error("bad_message", "type must be Speak, Flush, Clear, Close or KeepAlive")
        return False

    # -- client messages ----------------------------------------------------------------------

    def _open_segment(self) -> Segment:
        """The segment that takes new text: the last one, unless it is flushed or over."""
        last = self.segments[-1] if self.segments else None
        if last is not None and last.utterance is not None:
            stream = last.utterance.stream
            if stream is not None and stream.closed:  # ended by the idle limit
                last.flushed = True
        if last is None or last.flushed:
            self.sequence += 1
            last = Segment(self.sequence)
            self.segments.append(last)
            self.changed.set()
        return last

    async def _speak(self, text: str, custom_dictionary: str | None = None) -> None:
        segment = self._open_segment()
        if segment.utterance is None:  # fed once its turn comes: held here till then
            if custom_dictionary is not None:  # the flush's pronunciations, until it opens
                segment.custom_dictionary = custom_dictionary
            waiting = sum(len(p) for s in self.segments for p in s.pieces)
            if waiting + len(text) > self.core.policy.max_chars:  # as the core's own limit
                if not segment.pieces:  # made for this piece: it has none
                    self.segments.remove(segment)
                await self.error("too-long", "text waiting over limits.max_text_chars")
                return
            segment.pieces.append(text)
            self.changed.set()
            return
        try:
            self.core.feed(segment.utterance, text, False)
        except Refused as exc:  # this piece is dropped; the flush goes on
            await self.error(exc.code, str(exc))

    async def _flush(self) -> None:
        if len(self.segments) >= MAX_FLUSHES:
            await self.error("busy", f"more than {MAX_FLUSHES} flushes waiting to be spoken")
            return
        segment = self._open_segment()
        segment.flushed = True
        if segment.utterance is not None:
            with contextlib.suppress(Refused):  # already ended: its outcome tells
                self.core.feed(segment.utterance, "", True)
        self.changed.set()

    async def _clear(self) -> None:
        """Barge-in: stop what speaks, drop what waits; `Cleared` once nothing more of
        it can come."""
        speaking = self.segments[0] if self.segments else None
        if speaking is not None and speaking.utterance is not None:
            speaking.cleared = speaking.flushed = True  # later text: the next flush
            assert speaking.audio is not None
            speaking.audio.dropped = True
            self.core.cancel(speaking.utterance, "cleared")
            while len(self.segments) > 1:
                self.segments.pop()
            return
        self.segments.clear()
        await self.event("Cleared", sequence_id=self.sequence)

    async def _drained(self) -> None:
        while self.segments and not self.ws.closed:
            self.changed.clear()
            await self.changed.wait()

    # -- speaking, one flush after another ----------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._speak_flushes()
        except Exception:  # a bug here must not leave the client waiting on a dead socket
            log.exception("speech WebSocket failed")
            await self.event("Error", code="internal", description="internal error")
            await self.ws.close(code=1011)

    async def _speak_flushes(self) -> None:
        while True:
            segment = self.segments[0] if self.segments else None
            if segment is None or not (segment.pieces or segment.flushed):
                self.changed.clear()
                await self.changed.wait()
                continue
            event = await self._speak_segment(segment) if segment.pieces else None
            if self.segments and self.segments[0] is segment:
                self.segments.popleft()
            await self._conclude(segment, event)
            self.changed.set()

    async def _speak_segment(self, segment: Segment) -> Event | None:
        """Open the segment's utterance, feed what waited, await its outcome (None:
        refused at its start; the client was told)."""
        ask = Ask(
            id=new_id("http-ws"),
            source="http-ws",
            voice=self.voice,
            speed=self.speed,
            speaker=self.speaker,
            custom_dictionary=segment.custom_dictionary or self.custom_dictionary,
        )
        segment.audio, segment.sink = SocketAudio(self), OutcomeSink(self.loop)
        try:
            with self.frontend.guard.budget(self.request):
                utterance = self.core.feed_stream(ask, "", False, segment.sink, segment.audio)
        except (Refused, ApiError) as exc:
            await self.error(exc.code, str(exc), sequence_id=segment.sequence)
            return None
        segment.utterance = utterance
        pieces, segment.pieces = segment.pieces, []
        for piece in pieces:
            try:
                self.core.feed(utterance, piece, False)
            except Refused as exc:
                await self.error(exc.code, str(exc), sequence_id=segment.sequence)
        if segment.flushed:
            with contextlib.suppress(Refused):
                self.core.feed(utterance, "", True)
        return await segment.sink.outcome

    async def _conclude(self, segment: Segment, event: Event | None) -> None:
        """The flush's one terminal message, after its last audio."""
        sequence = segment.sequence
        if segment.cleared:
            await self.event("Cleared", sequence_id=sequence)
            return
        if event is None:
            if segment.utterance is None and not segment.pieces:  # a Flush of nothing
                await self.event("Flushed", sequence_id=sequence)
            return
        failure = failure_of(event)
        if failure is not None:  # (the core counted it)
            await self.event(
                "Error", code=failure.code, description=str(failure), sequence_id=sequence
            )
            return
        assert segment.audio is not None
        tail = segment.audio.tail()
        if tail:
            await self.send_audio(tail)
        if event.fields.get("error"):  # text stopped coming without a Flush
            await self.event(
                "Warning",
                code="stream-idle",
                description=event.fields["error"],
                sequence_id=sequence,
            )
        else:
            await self.event("Flushed", sequence_id=sequence)

    # -- sending --------------------------------------------------------------------------------

    async def send_audio(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def event(self, kind: str, **body: Any) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_json({"type": kind, **body})

    async def error(self, code: str, description: str, **body: Any) -> None:
        """An `Error` for a message or flush that was refused (the connection stays)."""
        self.frontend.refused(self.request, ApiError(400, description, code))
        await self.event("Error", code=code, description=description, **body)
