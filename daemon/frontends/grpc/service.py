"""`nvidia.riva.tts.RivaSpeechSynthesis`: the three methods, each a translation to the core.

- `Synthesize`: one text → `core.submit` → one response with the whole audio.
- `SynthesizeOnline`: a stream of requests (the 2.27+ client sends one per piece of text,
  each repeating the first's settings) → the core's streamed-text path (`feed_stream`,
  then `feed` per piece, final when the client half-closes) → a response per encoded
  piece as it is made, the first after the first clause; the last response carries the
  encoder's tail and `meta`.
- `GetRivaSynthesisConfig`: the catalogue, in Riva's shape (names.py).

Every refusal is a status with a message (status.py); a call the client cancels, or whose
deadline passes, stops its synthesis before the next decoder window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from magpie_tts.daemon.core.core import Core
from magpie_tts.daemon.core.utterance import Ask, Refused, Utterance, new_id
from magpie_tts.daemon.voices import unknown_voice

from . import fields, names
from .call import CallAudio
from .fields import Settings, bad
from .status import RpcError, failure_of, refusal
from .stubs import stubs

if TYPE_CHECKING:
    from .server import GrpcFrontend

log = logging.getLogger(__name__)


class RivaSynthesis:
    """The servicer (registered with the stubs' `add_RivaSpeechSynthesisServicer_to_server`)."""

    def __init__(self, frontend: GrpcFrontend) -> None:
        self.frontend = frontend
        self.host = frontend.host
        self.gate = frontend.gate
        self.limits = frontend.config.limits
        self.max_whole_s = frontend.config.http.max_file_audio_s
        self.pb = stubs().tts

    # -- the methods --------------------------------------------------------------------------

    async def Synthesize(self, request: Any, context: Any) -> Any:  # Riva's method names
        try:
            core = self._open(context)
            settings = fields.settings(request, self.host.catalogue())
            if not request.text.strip():
                raise bad("text is empty", "empty-text")
            loop = asyncio.get_running_loop()
            call = CallAudio(loop, settings, self.limits.client_stall_s, self.max_whole_s)
            ask = self._ask(settings, "grpc", request.text)
            utterance = self._admit(context, lambda: core.submit(ask, call, call))
        except RpcError as exc:
            return await self._refuse(context, "Synthesize", exc)
        self._cancel_when_done(context, core, utterance)
        event = await call.outcome
        failure = call.refusal or failure_of(event)
        if failure is not None:
            return await self._abort(context, failure)
        assert call.kept is not None
        audio = bytes(call.kept.data) + call.tail()
        return self._response(request, audio, utterance, request.text, call.take_words())

    async def SynthesizeOnline(self, requests: AsyncIterator[Any], context: Any) -> None:
        try:
            core = self._open(context)
            first = await self._first(requests)
            settings = fields.settings(first, self.host.catalogue())
            loop = asyncio.get_running_loop()
            call = CallAudio(loop, settings, self.limits.client_stall_s, None)
            ask = self._ask(settings, "grpc-stream")
            utterance = self._admit(context, lambda: core.feed_stream(ask, "", False, call, call))
        except RpcError as exc:
            await self._refuse(context, "SynthesizeOnline", exc)
            return
        self._cancel_when_done(context, core, utterance)
        text: list[str] = []
        reader = asyncio.ensure_future(
            self._feed(context, core, call, utterance, first, requests, text)
        )
        try:
            async for piece in call.streamed():
                await context.write(self._response(first, piece, words=call.take_words()))
            failure = call.refusal or failure_of(call.outcome.result())
            if failure is not None:
                await self._abort(context, failure)
            said, words = "".join(text), call.take_words()
            await context.write(self._response(first, call.tail(), utterance, said, words))
        finally:
            reader.cancel()

    async def GetRivaSynthesisConfig(self, request: Any, context: Any) -> Any:
        try:
            self._open(context)
            catalogue = self.host.catalogue()
            if request.model_name and all(v.name != request.model_name for v in catalogue):
                raise bad(str(unknown_voice(request.model_name)), "unknown-voice")
        except RpcError as exc:
            return await self._refuse(context, "GetRivaSynthesisConfig", exc)
        response = self.pb.RivaSynthesisConfigResponse()
        for summary in catalogue:
            if request.model_name and summary.name != request.model_name:
                continue
            config = response.model_config.add(model_name=summary.name)
            subvoices = names.subvoices(summary)
            config.parameters.update(
                {
                    "language_code": names.language_tag(summary.language),
                    "voice_name": names.model_voice_name(summary),
                    "subvoices": ",".join(f"{name}:{i}" for i, name in enumerate(subvoices)),
                    "sample_rate": str(summary.sample_rate),
                    "encodings": ",".join(fields.ENCODINGS),
                    "magpie_voice": summary.name,
                }
            )
        return response

    # -- streamed text in -----------------------------------------------------------------------

    async def _first(self, requests: AsyncIterator[Any]) -> Any:
        """The stream's first request, which carries its settings, in bounded time."""
        wait_s = self.limits.client_read_timeout_s
        try:
            return await asyncio.wait_for(requests.__anext__(), wait_s)
        except StopAsyncIteration:
            raise bad("the request stream was empty", "empty-text") from None
        except asyncio.TimeoutError:
            raise RpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no request within {wait_s:g} s (limits.client_read_timeout_s)",
                "timeout",
            ) from None

    async def _feed(
        self,
        context: Any,
        core: Core,
        call: CallAudio,
        utterance: Utterance,
        first: Any,
        requests: AsyncIterator[Any],
        text: list[str],
    ) -> None:
        """Each request's text into the stream, final when the client half-closes. A
        piece that cannot be spoken, or a request that changes the settings, fails the
        call (what was made is not passed off as all of it)."""
        try:
            core.feed(utterance, first.text, False)
            text.append(first.text)
            async for request in requests:
                if fields.same_as(request) != call.settings.same_as:
                    raise bad("every request of a stream must carry the first one's settings")
                core.feed(utterance, request.text, False)
                text.append(request.text)
            if not "".join(text).strip():
                raise bad("text is empty", "empty-text")
            core.feed(utterance, "", True)
            return
        except Refused as exc:
            assert utterance.stream is not None
            if utterance.stream.closed:  # ended by the core (idle, stalled): it answers
                return
            problem = refusal(exc)
        except RpcError as exc:
            problem = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the request stream broke: the call ends, which ends it
            log.debug("gRPC SynthesizeOnline: request stream ended: %s", type(exc).__name__)
            return
        core.refused(self.frontend.name, problem.kind)
        self.gate.log_refusal(context, "SynthesizeOnline", problem)
        call.refuse(problem)
        core.cancel(utterance, f"refused: {problem.kind}")

    # -- shared --------------------------------------------------------------------------------

    def _open(self, context: Any) -> Core:
        if not self.host.ready:
            raise RpcError(grpc.StatusCode.UNAVAILABLE, "the voice is not ready yet", "loading")
        self.gate.authenticate(context)
        return self.host.core

    def _ask(self, settings: Settings, source: str, text: str = "") -> Ask:
        choice = settings.choice
        return Ask(
            id=new_id("grpc"),
            text=text,
            source=source,
            voice=choice.voice,
            speaker=choice.speaker,
            custom_dictionary=settings.custom_dictionary or None,
        )

    def _admit(self, context: Any, open_: Callable[[], Utterance]) -> Utterance:
        try:
            with self.gate.budget(context):
                return open_()
        except Refused as exc:
            raise refusal(exc) from None

    def _cancel_when_done(self, context: Any, core: Core, utterance: Utterance) -> None:
        """A call that ends before its utterance (cancelled by the client, past its
        deadline, its connection lost) stops its synthesis at once."""

        def ended(_: Any) -> None:
            if utterance.outcome is None:
                core.cancel(utterance, "client disconnected")

        context.add_done_callback(ended)

    async def _refuse(self, context: Any, method: str, error: RpcError) -> None:
        """A call refused before the core took it: counted, logged, answered."""
        if self.host.ready:
            self.host.core.refused(self.frontend.name, error.kind)
        self.gate.log_refusal(context, method, error)
        await self._abort(context, error)

    async def _abort(self, context: Any, error: RpcError) -> None:
        context.set_trailing_metadata(error.trailers())
        await context.abort(error.code, str(error))

    def _response(
        self,
        request: Any,
        audio: bytes,
        utterance: Utterance | None = None,
        text: str = "",
        words: Sequence[Any] = (),
    ) -> Any:
        response = self.pb.SynthesizeSpeechResponse(audio=audio)
        for word in words:  # Riva's offsets: milliseconds of the call's audio
            timing = response.meta.words.add(word=word.word)
            timing.start_time, timing.end_time = round(word.start * 1000), round(word.end * 1000)
        if request.HasField("id"):
            response.id.CopyFrom(request.id)
        if utterance is not None:  # the last (or only) response: what was said
            response.meta.text = text
            response.meta.processed_text = " ".join(utterance.units)
        return response
