"""Streaming synthesis: clauses → phoneme ids → frontend (z) → chunked decoder → PCM."""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import TextError
from ..text.phonemize import Phonemizer
from ..text.policy import TextStream
from ..values import AudioChunk, StageTimes, StopToken, SynthesisOptions, WordTime
from ..voice import Voice
from .cache import PhraseCache, clear_directory
from .config import CacheUse, EngineConfig
from .expander import Expander
from .latent import FlowLatent, unit_noise
from .sessions import load_sessions
from .turns import GUARD_S, SPEAKER, Pace, Turns
from .units import Stream

log = logging.getLogger(__name__)

PHRASE_WORDS = 1024  # cached phrases whose word times are kept
# Units whose frontends a lone stream runs ahead of its decoding (units.py, look_ahead):
# with one, a unit's decoding (parts on both cores) could end before the next unit's
# encoder, slowed by sharing the cores, and waited for it.
LOOK_AHEAD_UNITS = 2
WARM_TEXTS = ("Hi.", "Warming up the voice.", "This sentence warms the frontend for longer input.")


class StreamingSynthesizer:
    """Warm sessions for one voice; streams audio chunks for text or a text stream."""

    def __init__(self, voice: Voice, config: EngineConfig) -> None:
        started = time.perf_counter()
        self.voice = voice
        self.config = config
        self.phonemizer = Phonemizer(voice)
        self.sessions = sessions = load_sessions(voice, config, self.flow_probes)
        # Read off the synthesizer by status, the tools and the tests (sessions.py says
        # what each is); `expands` is the synthesizer's own to switch.
        self.choice, self.runtime = sessions.choice, sessions.runtime
        self.providers, self.precisions = sessions.providers, sessions.precisions
        self.precision, self.precision_reason = sessions.precision, sessions.precision_reason
        self.graph_paths, self.flow = sessions.graph_paths, sessions.flow
        self.latent_name, self.durations_name = sessions.latent_name, sessions.durations_name
        self.context, self.decoder = sessions.context, sessions.decoder
        self.frontend = sessions.frontends[0]
        self.expands = sessions.expands  # INT8's pause hiss gated (expander.py)
        self.phrase_cache = (
            PhraseCache(config.cache, config.cache_dir / "phrases")
            if config.cache.memory_bytes > 0
            else None
        )
        if self.phrase_cache is None and not config.cache.disk:
            clear_directory(config.cache_dir / "phrases")  # audio an older version kept
        # Sessions and decoder buffers are shared: one window at a time, the most urgent
        # stream's first (turns.py).
        self.turns = Turns(sessions.workers)
        # A lone stream's next unit's encoder runs beside its decoding, on a worker
        # lane's one-thread frontend (units.py, Stream.look_ahead).
        self.lookahead = (
            ThreadPoolExecutor(1, thread_name_prefix="frontend-ahead")
            if self.decoder.split_parts  # one-thread lanes: no spinning pool beside it
            else None
        )
        self.decoder.waiting = lambda: self.turns.waiting
        self.decoder.lane = self.turns.lane
        self.stages: StageTimes | None = None  # set to profile (one stream at a time)
        # Frontend seconds per character of a unit's text (with its context words) in
        # each lane, measured: how long a stream's coming frontend turn will take.
        self.frontend_s_per_char = [0.0] * len(sessions.frontends)
        # The same per frame of audio it makes (warm-up): the lanes' speed (speed.py).
        self.frontend_s_per_frame = [0.0] * len(sessions.frontends)
        self.first_turn_s: float | None = None  # a stream's first turn, measured (EMA)
        # Word times of cached phrases, by cache key (in memory only, as their audio)
        self.phrase_words: OrderedDict[str, list[WordTime]] = OrderedDict()
        self.load_ms = (time.perf_counter() - started) * 1000
        self.warmup_ms = self.warm()
        log.info(
            "voice %s ready: provider=%s (frontend %s) precision=%s, frontend %s (%s) "
            "load=%.0f ms warm-up=%.0f ms",
            voice.name,
            self.choice.used,
            self.providers["frontend"],
            self.precision,
            sessions.frontend_precision,
            self.precision_reason,
            self.load_ms,
            self.warmup_ms,
        )

    # -- text ---------------------------------------------------------------------------

    def clauses(self, text: str) -> list[str]:
        """Validate and segment text (the engine's text policy); TextError before audio."""
        return self.config.text.units(text)

    # -- synthesis ------------------------------------------------------------------------

    def _scales(self, options: SynthesisOptions) -> np.ndarray:
        voice = self.voice
        return np.array(
            [
                voice.noise_scale if options.noise_scale is None else options.noise_scale,
                voice.length_scale / options.speed,
                voice.noise_w if options.noise_w is None else options.noise_w,
            ],
            dtype=np.float32,
        )

    def frontend_feeds(self, ids: list[int], options: SynthesisOptions) -> dict[str, np.ndarray]:
        feeds = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": self._scales(options),
        }
        sid = self.voice.speaker_id(options.speaker)
        if sid is not None:
            feeds["sid"] = np.array([sid], dtype=np.int64)
        return feeds

    def flow_probes(self) -> list[tuple[int, dict[str, np.ndarray]]]:
        """Two inputs of different lengths (noise off) that the flow split is checked on."""
        quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
        texts = ("Hello.", "The kitchen lights are now off.")
        ids = [self.phonemizer.clause_ids(text) for text in texts]
        return [(len(each), self.frontend_feeds(each, quiet)) for each in ids]

    def prior(
        self, ids: list[int], options: SynthesisOptions, durations: bool, frontend: Any = None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(z_p, mask, durations) from the encoder, or (z, None, durations) where the
        frontend runs whole; durations only when asked (the voice must have them). Runs
        on the calling turn's lane's frontend session, or on `frontend`."""
        session = frontend or self.sessions.frontends[self.turns.lane()]
        feeds = self.frontend_feeds(ids, options)
        if durations:
            assert self.durations_name is not None
        wanted = (self.durations_name,) if durations and self.durations_name else ()
        if self.flow is None:  # the whole frontend draws its own noise (unseeded)
            out = session.run([self.latent_name, *wanted], feeds)
            prior, mask = out[0], None
        else:
            rng = unit_noise(self.config.seed, ids)
            prior, mask, out = self.flow.encode(session, feeds, len(ids), rng, wanted)
        frames = out[-1].reshape(-1).astype(np.int64) if durations else None
        return prior, mask, frames

    def prior_ahead(
        self, ids: list[int], options: SynthesisOptions, durations: bool, flow: bool
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """`prior` on the last worker lane's sessions (a look-ahead, units.py); with
        `flow`, the flow run over every frame too: (z, None, durations), as a whole
        frontend gives them."""
        lane = len(self.sessions.frontends) - 1
        prior, mask, frames = self.prior(ids, options, durations, self.sessions.frontends[lane])
        if not flow or mask is None:
            return prior, mask, frames
        return self._flow_on(lane, prior, mask), None, frames

    def run_flow(self, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The flow session of the calling turn's lane on frames of z_p."""
        return self._flow_on(self.turns.lane(), prior, mask)

    def _flow_on(self, lane: int, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        assert self.flow is not None
        feeds = {
            self.flow.prior: np.ascontiguousarray(prior),
            self.flow.mask: np.ascontiguousarray(mask),
        }
        return self.sessions.flows[lane].run([self.latent_name], feeds)[0]

    def windowed_latent(
        self, prior: np.ndarray, mask: np.ndarray | None, reads: tuple[int, int], small_first: bool
    ) -> np.ndarray | FlowLatent:
        """z for the decoder: made by the flow as windows read it (frames `reads` of it,
        the first window alone when `small_first`), or z itself from a whole frontend."""
        if mask is None or self.flow is None:
            return prior
        return FlowLatent(self.run_flow, prior, mask, self.flow.context, reads, small_first)

    def _whole_latent(self, prior: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """z over every frame at once: the flow run whole (or z from a whole frontend)."""
        return prior if mask is None else self.run_flow(prior, mask)

    def latent(self, ids: list[int], options: SynthesisOptions) -> np.ndarray:
        prior, mask, _ = self.prior(ids, options, durations=False)
        return self._whole_latent(prior, mask)

    def latent_and_durations(
        self, ids: list[int], options: SynthesisOptions
    ) -> tuple[np.ndarray, np.ndarray]:
        """z and the frames each id lasts (the voice must have durations)."""
        prior, mask, durations = self.prior(ids, options, durations=True)
        assert durations is not None
        return self._whole_latent(prior, mask), durations

    # -- timings the streams share (units.py) ---------------------------------------------

    def first_audio_s(self, first_step: int, frontend_s: float, pace: Pace) -> float:
        """Audio an utterance's first chunk must hold so that the stream need not come
        back for a turn before its next turn is due anyway: after the turns of the other
        streams decoding now, those still waiting for their first sound and those started
        before it (at least one turn); 0 when none waits. Turns are estimated from the
        first turns measured so far (else from this one's frontend and first window).
        With a 16-frame first chunk (0.19 s) a started stream turned urgent at once, and
        ten streams started two turns apart instead of one; sized by the streams still to
        start only, the last to start ran dry while all ten took their second turns. The
        local speaker keeps its small first chunk: its turns come first anyway."""
        if first_step != 0 or pace.priority == SPEAKER or not self.turns.waiting:
            return 0.0
        others = max(self.turns.others(pace), 1)  # at least one other stream's turn
        turn_s = self.first_turn_s
        if turn_s is None:
            per_frame = self.decoder.seconds_per_frame or 0.0
            turn_s = frontend_s + per_frame * (self.config.schedule[0] + self.context)
        return GUARD_S + math.ceil(others / self.turns.lanes) * turn_s

    def frontend_took(self, seconds: float, chars: int) -> None:
        """Follow the lane's measured frontend speed (a moving average: load varies)."""
        lane = self.turns.lane()
        rates = self.frontend_s_per_char
        rates[lane] = 0.7 * rates[lane] + 0.3 * seconds / max(chars, 1)

    # -- streams ------------------------------------------------------------------------

    def stream_clauses(
        self,
        clauses: Iterable[str],
        options: SynthesisOptions | None = None,
        stop: StopToken | None = None,
        cache_use: CacheUse = "auto",
        first_index: int = 0,
        priority: int = SPEAKER,
    ) -> Iterator[AudioChunk]:
        """Audio for units already validated by the text policy, as they are decoded.

        cache_use: "auto" (hot phrases only), "keep" (the request marks its units
        cacheable), "pin" (configured hot phrases), "bypass" (measure synthesis).
        first_index > 0 resumes an utterance: no small first chunk for it.
        priority: SPEAKER (local playback) or CLIENT, for the order of turns when
        several streams decode at once.
        """
        stop = stop or StopToken()
        expand = Expander(self.voice.sample_rate) if self.expands else None
        stream = Stream(
            self, options or SynthesisOptions(), stop, cache_use, Pace(priority), expand
        )
        known = clauses if isinstance(clauses, Sequence) else None  # else text still arriving
        try:
            for index, clause in enumerate(clauses, start=first_index):
                if stop.stopped:
                    return
                if known is not None:
                    following = index - first_index + 1
                    stream.upcoming = list(
                        enumerate(known[following : following + LOOK_AHEAD_UNITS], index + 1)
                    )
                for chunk in stream.clause_audio(clause, index):
                    yield stream.expanded(chunk)
            rate = self.voice.sample_rate
            if not stop.stopped and (flushed := stream.join.flush(rate)) is not None:
                yield stream.expanded(flushed)
        finally:
            self.turns.ended(stream.pace)
            stream.cancel_ahead()

    def stream(
        self,
        text: str,
        options: SynthesisOptions | None = None,
        stop: StopToken | None = None,
    ) -> Iterator[AudioChunk]:
        """Validate now (TextError), then stream chunks lazily as the caller iterates."""
        return self.stream_clauses(self.clauses(text), options, stop)

    def synthesize(self, text: str, options: SynthesisOptions | None = None) -> np.ndarray:
        chunks = [c.pcm for c in self.stream(text, options)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    def text_stream(self) -> TextStream:
        return self.config.text.stream()

    def warm(self) -> float:
        started = time.perf_counter()
        quiet = SynthesisOptions()
        for lane, frontend in enumerate(self.sessions.frontends):
            for sentence in WARM_TEXTS:
                for clause in self.clauses(sentence):
                    ids = self.phonemizer.clause_ids(clause)
                    began = time.perf_counter()
                    prior, mask, _ = self.prior(ids, quiet, durations=False, frontend=frontend)
                    if mask is not None:  # the flow, whole and over a first window
                        self._flow_on(lane, prior, mask)
                    spent = time.perf_counter() - began  # a later unit's first turn
                    if mask is not None:
                        first = min(64, prior.shape[2])
                        self._flow_on(lane, prior[:, :, :first], mask[:, :, :first])
            self.frontend_s_per_char[lane] = spent / len(clause)  # the longest, warm
            self.frontend_s_per_frame[lane] = spent / max(prior.shape[2], 1)
        self.decoder.warm(self.voice.speaker_id(None))
        return (time.perf_counter() - started) * 1000

    def remember_words(self, key: str, words: list[WordTime]) -> None:
        """A cached phrase's word times; bounded, the oldest forgotten first."""
        self.phrase_words[key] = words
        self.phrase_words.move_to_end(key)
        while len(self.phrase_words) > PHRASE_WORDS:
            self.phrase_words.popitem(last=False)

    def pin_hot_phrases(self) -> int:
        """Synthesize the configured hot phrases into the cache (at start); how many."""
        if self.phrase_cache is None:
            return 0
        count = 0
        for phrase in self.config.cache.hot_phrases:
            try:
                units = self.clauses(phrase)
            except TextError as exc:
                log.warning("hot phrase skipped: %s", exc)
                continue
            for _ in self.stream_clauses(units, cache_use="pin"):
                pass
            count += len(units)
        return count
