"""One call's audio and outcome: the core's AudioOut and Sink for a gRPC call.

Audio is encoded on the synthesis thread (../encoding), then handed to the call's event
loop. For `SynthesizeOnline` each encoded piece waits in a small queue that the handler
empties into the stream as gRPC's flow control lets it: a client that reads slowly slows
its own synthesis, and one that takes nothing for `limits.client_stall_s` is cut off
(its synthesis stops, the call ends ABORTED). For `Synthesize` the audio is kept until
the end, at most `http.max_file_audio_s` of it, as a whole file on HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from magpie_tts.daemon.core.utterance import Event, Utterance

from ..backpressure import deliver
from ..encoding import AudioOutput, WholeAudio, open_output
from .fields import Settings
from .status import Code, RpcError

QUEUE_PIECES = 2  # encoded pieces that may wait for the client: the rest waits on synthesis


class CallAudio:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        settings: Settings,
        stall_s: float,
        max_whole_s: float | None,  # None: streamed out; else kept, at most this long
    ) -> None:
        self.loop = loop
        self.settings = settings
        self.stall_s = stall_s
        self.output: AudioOutput | None = None  # opened with the first chunk (its rate)
        self.pieces: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_PIECES)
        self.outcome: asyncio.Future[Event] = loop.create_future()
        # Synthesize's whole audio (None: SynthesizeOnline streams it out)
        self.kept = WholeAudio(max_whole_s) if max_whole_s is not None else None
        self.refusal: RpcError | None = None  # the call's answer, whatever was made
        # Words timed but not yet sent: appended on the synthesis thread before the audio
        # they describe is handed over, taken on the loop with that audio or after it.
        self.timings: list[Any] = []

    def refuse(self, error: RpcError) -> None:
        if self.refusal is None:
            self.refusal = error

    # -- AudioOut: on a synthesis thread ------------------------------------------------------

    def words(self, words: list[Any]) -> None:  # AudioOut's optional part (core/client.py)
        if self.settings.word_offsets:
            self.timings.extend(w for w in words if w.kind == "word")

    def write(self, pcm: np.ndarray, sample_rate: int) -> bool:
        if self.output is None:
            self.output = open_output(self.settings.fmt, sample_rate, self.settings.rate)
        if self.kept is not None:
            return self._keep(pcm, sample_rate)
        data = self.output.write(pcm.astype("<i2").tobytes())
        if not data:
            return True  # the codec is filling a frame
        return deliver(self.loop, self.pieces.put(data), self.stall_s, None, "gRPC client")

    def _keep(self, pcm: np.ndarray, rate: int) -> bool:
        assert self.output is not None and self.kept is not None
        if self.kept.keep(self.output, pcm, rate):
            return True
        self.refuse(
            RpcError(
                Code.INVALID_ARGUMENT,
                f"the whole audio would be over {self.kept.max_s:g} s "
                "(http.max_file_audio_s): use SynthesizeOnline",
                "too-long",
            )
        )
        return False  # ends the synthesis

    # -- Sink: from a core thread ---------------------------------------------------------------

    def report(self, utterance: Utterance, event: Event) -> None:
        if event.terminal:
            self.loop.call_soon_threadsafe(self._settle, event)

    def _settle(self, event: Event) -> None:
        if not self.outcome.done():
            self.outcome.set_result(event)

    # -- on the call's event loop ----------------------------------------------------------------

    async def streamed(self) -> AsyncIterator[bytes]:
        """The encoded pieces as they come, until the outcome (then what is left)."""
        while not self.outcome.done():
            getter = asyncio.ensure_future(self.pieces.get())
            await asyncio.wait({getter, self.outcome}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        while not self.pieces.empty():  # put before the outcome was reported
            yield self.pieces.get_nowait()

    def take_words(self) -> list[Any]:
        """The words timed so far and not yet sent (each is sent once)."""
        taken = self.timings[: len(self.timings)]
        del self.timings[: len(taken)]
        return taken

    def tail(self) -> bytes:
        """The encoder's last frames (once the synthesis has ended)."""
        return b"" if self.output is None else self.output.finish()
