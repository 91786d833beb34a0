"""Streaming synthesis: clauses → phoneme ids → frontend (z) → chunked decoder → PCM."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import TextError, VoiceError
from ..graph.flow_split import split_flow
from ..graph.split import split_voice
from ..precision import disabled_optimizers, expands, select_decoder, select_frontend
from ..runtime import (
    RuntimeConfig,
    choose_provider,
    confirm_provider,
    make_session,
    provider_name,
)
from ..text.phonemize import MAX_UNIT_IDS, Phonemizer
from ..text.policy import TextPolicy, TextStream
from ..text.segment import context_of
from ..values import AudioChunk, StageTimes, StopToken, SynthesisOptions, to_pcm
from ..voice import Voice
from .cache import CacheConfig, PhraseCache, clear_directory
from .decoder import DEFAULT_CONTEXT, DEFAULT_SCHEDULE, ChunkedDecoder, bucket_lengths
from .expander import Expander
from .latent import FlowLatent, unit_noise
from .seam import SampleCrop, crossfade, fade_out, unit_span
from .turns import GUARD_S, SPEAKER, Pace, Turns

log = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "int8"]
CacheUse = Literal["auto", "keep", "pin", "bypass"]
WARM_TEXTS = ("Hi.", "Warming up the voice.", "This sentence warms the frontend for longer input.")
CONTEXT_IDS = 80  # room for the context words of a cut unit beyond MAX_UNIT_IDS


@dataclass(frozen=True)
class EngineConfig:
    cache_dir: Path
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    precision: Precision = "auto"
    schedule: tuple[int, ...] = DEFAULT_SCHEDULE
    context: int | None = None  # None: the decoder's receptive field (exact windows)
    text: TextPolicy = field(default_factory=TextPolicy)
    cache: CacheConfig = field(default_factory=lambda: CacheConfig(memory_bytes=0))
    # Lanes of sessions that serve several streams side by side, each on its share of
    # the threads (CPU only; turns.py); 0: one stream's turn at a time on every thread.
    workers: int = 0
    # Run the flow (z_p → z) apart from the encoder, over the frames each window needs
    # (latent.py); False runs the frontend whole, as before (for comparison).
    windowed_flow: bool = True
    # Noise per unit from its phoneme ids and this seed: the same text, the same audio
    # (tests, bug reports). None: fresh noise every time, as Piper does.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ValueError(f"seed {self.seed} outside 0..2**32-1")


@dataclass
class _Join:
    """State between the units of one utterance: the held tail of a unit cut mid-sentence."""

    tail: np.ndarray | None = None
    index: int = 0

    def flush(self, rate: int) -> AudioChunk | None:
        """The tail faded out, when no unit continues it."""
        if self.tail is None:
            return None
        chunk = AudioChunk(fade_out(self.tail), rate, self.index)
        self.tail = None
        return chunk


class StreamingSynthesizer:
    """Warm sessions for one voice; streams audio chunks for text or a text stream."""

    def __init__(self, voice: Voice, config: EngineConfig) -> None:
        started = time.perf_counter()
        self.voice = voice
        self.config = config
        self.phonemizer = Phonemizer(voice)
        split = split_voice(voice, config.cache_dir)
        self.latent_name = split.latent_name
        self.durations_name = split.durations_name
        self.choice = choose_provider(config.runtime)
        decoder_path, self.precision, self.precision_reason = select_decoder(
            split, config.precision, self.choice.used, config.runtime.trt_fp16
        )
        frontend_path, self.frontend_precision = select_frontend(split, self.precision)
        self.expands = expands(split, self.precision)  # INT8's pause hiss gated (expander.py)
        # The runtime this voice's sessions get: its INT8 graphs in the measured layout.
        self.runtime = runtime = replace(
            config.runtime, disabled_optimizers=disabled_optimizers(split, self.precision)
        )
        self.graph_paths = {"frontend": frontend_path, "decoder": decoder_path}
        self.flow = (
            split_flow(frontend_path, split.latent_name, split.durations_name, self.flow_probes)
            if config.windowed_flow
            else None
        )
        encoder_path = self.flow.encoder if self.flow else frontend_path
        if config.seed is not None and self.flow is None:
            log.warning(
                "engine.seed is set, but the frontend runs whole and draws its own noise: "
                "audio is not reproducible (needs the windowed flow)"
            )
        # What runs each graph, as status reports it; the phrase cache keys audio by that
        # and the seed (a seeded phrase is the audio that seed makes).
        self.precisions = {"frontend": self.frontend_precision, "decoder": self.precision}
        self.precisions_key = f"{self.precision}/frontend {self.frontend_precision}" + (
            f"/seed {config.seed}" if config.seed is not None and self.flow else ""
        )
        # Context each side of a window: the decoder's own receptive field where the graph
        # tells it (11 frames for Piper medium voices), so no frame is decoded in vain.
        self.context = config.context
        if self.context is None:
            self.context = split.context_frames or DEFAULT_CONTEXT
        buckets = bucket_lengths(config.schedule, self.context)
        profile = (split.latent_name, buckets[0], buckets[-1], buckets[-1])
        # Worker lanes only on CPU: a GPU runs one stream's window at a time anyway.
        workers = config.workers if self.choice.used == "cpu" else 0
        threads = runtime.intra_op_threads or os.cpu_count() or 1
        share = max(1, threads // max(workers, 1))
        single = replace(runtime, intra_op_threads=share)
        try:
            self.frontend = make_session(encoder_path, runtime, self.choice, "frontend")
            flow_sessions = [
                make_session(self.flow.flow, lane, self.choice, "frontend")
                for lane in ([runtime] + [single] * workers if self.flow else [])
            ]
            decoder_session = make_session(decoder_path, runtime, self.choice, "decoder", profile)
            lanes = [
                (
                    make_session(encoder_path, single, self.choice, "frontend"),
                    make_session(decoder_path, single, self.choice, "decoder", profile),
                )
                for _ in range(workers)
            ]
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise VoiceError(f"cannot load voice {voice.model_path}: {exc}") from exc
        self._frontends = [self.frontend, *(front for front, _ in lanes)]
        self._flows = flow_sessions  # per lane, like the frontends (none: runs whole)
        # What really runs each graph (the frontend never goes to TensorRT).
        self.providers = {
            "frontend": provider_name(self.frontend),
            "decoder": confirm_provider(self.choice, decoder_session),
        }
        self.decoder = ChunkedDecoder(
            decoder_session,
            self.choice.used,
            voice.hop_length,
            config.schedule,
            self.context,
            voice.sample_rate,
            [decoder for _, decoder in lanes],
        )
        self.phrase_cache = (
            PhraseCache(config.cache, config.cache_dir / "phrases")
            if config.cache.memory_bytes > 0
            else None
        )
        if self.phrase_cache is None and not config.cache.disk:
            clear_directory(config.cache_dir / "phrases")  # audio an older version kept
        # Sessions and decoder buffers are shared: one window at a time, the most urgent
        # stream's first (turns.py).
        self.turns = Turns(workers)
        self.decoder.waiting = lambda: self.turns.waiting
        self.decoder.lane = self.turns.lane
        self.stages: StageTimes | None = None  # set to profile (one stream at a time)
        # Frontend seconds per character of a unit's text (with its context words) in
        # each lane, measured: how long a stream's coming frontend turn will take.
        self._frontend_s_per_char = [0.0] * len(self._frontends)
        self._first_turn_s: float | None = None  # a stream's first turn, measured (EMA)
        self.load_ms = (time.perf_counter() - started) * 1000
        self.warmup_ms = self.warm()
        log.info(
            "voice %s ready: provider=%s (frontend %s) precision=%s, frontend %s (%s) "
            "load=%.0f ms warm-up=%.0f ms",
            voice.name,
            self.choice.used,
            self.providers["frontend"],
            self.precision,
            self.frontend_precision,
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

    def _prior(
        self, ids: list[int], options: SynthesisOptions, durations: bool, frontend: Any = None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(z_p, mask, durations) from the encoder, or (z, None, durations) where the
        frontend runs whole; durations only when asked (the voice must have them). Runs
        on the calling turn's lane's frontend session, or on `frontend`."""
        session = frontend or self._frontends[self.turns.lane()]
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

    def _run_flow(self, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The flow session of the calling turn's lane on frames of z_p."""
        return self._flow_on(self.turns.lane(), prior, mask)

    def _flow_on(self, lane: int, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        assert self.flow is not None
        feeds = {
            self.flow.prior: np.ascontiguousarray(prior),
            self.flow.mask: np.ascontiguousarray(mask),
        }
        return self._flows[lane].run([self.latent_name], feeds)[0]

    def _latent(
        self, prior: np.ndarray, mask: np.ndarray | None, reads: tuple[int, int], small_first: bool
    ) -> np.ndarray | FlowLatent:
        """z for the decoder: made by the flow as windows read it (frames `reads` of it,
        the first window alone when `small_first`), or z itself from a whole frontend."""
        if mask is None or self.flow is None:
            return prior
        return FlowLatent(self._run_flow, prior, mask, self.flow.context, reads, small_first)

    def _whole_latent(self, prior: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """z over every frame at once: the flow run whole (or z from a whole frontend)."""
        return prior if mask is None else self._run_flow(prior, mask)

    def latent(self, ids: list[int], options: SynthesisOptions) -> np.ndarray:
        prior, mask, _ = self._prior(ids, options, durations=False)
        return self._whole_latent(prior, mask)

    def latent_and_durations(
        self, ids: list[int], options: SynthesisOptions
    ) -> tuple[np.ndarray, np.ndarray]:
        """z and the frames each id lasts (the voice must have durations)."""
        prior, mask, durations = self._prior(ids, options, durations=True)
        assert durations is not None
        return self._whole_latent(prior, mask), durations

    def _clause_audio(
        self,
        clause: str,
        index: int,
        options: SynthesisOptions,
        stop: StopToken,
        cache_use: CacheUse,
        pace: Pace,
        join: _Join,
    ) -> Iterator[AudioChunk]:
        rate = self.voice.sample_rate
        before, after = context_of(clause) if self.durations_name else ("", "")
        if not before and (flushed := join.flush(rate)) is not None:
            yield flushed  # this unit does not continue the cut one
        # A cut unit's audio depends on its neighbours: it is not a phrase to cache.
        cache = self.phrase_cache if cache_use != "bypass" and not (before or after) else None
        key = cache.key(self.voice, self.precisions_key, options, clause) if cache else None
        if cache is not None and key is not None:
            started = time.perf_counter()
            cached = cache.get(key)
            if cached is not None:
                spent = time.perf_counter() - started
                pace.made(len(cached) / rate)
                yield AudioChunk(cached, rate, index, spent, cached=True)
                return
            if not cache.wants(key, marked=cache_use in ("keep", "pin")):
                key = None
        started = time.perf_counter()
        sid = self.voice.speaker_id(options.speaker)
        pieces: list[np.ndarray] = []
        held: list[np.ndarray] = []
        # Only an utterance's first clause needs a small first chunk: later clauses are
        # made while earlier audio plays, and larger windows waste less on context.
        first_step = 0 if index == 0 else len(self.config.schedule) - 1
        chunks = self._unit_chunks(clause, before, after, options, sid, first_step, pace)
        # The first turn runs the unit's frontend: ask for it that much before running dry.
        pace.need_s = max(self._frontend_s_per_char) * len(before + clause + after)
        first_turn = pace.first_at is None  # this turn makes the stream's first sound
        while not stop.stopped:
            # One thread does a first turn as fast as two, and leaves a core to a stream
            # arriving meanwhile (turns.py).
            with self.turns.turn(pace, narrow=first_turn):
                pace.need_s = 0.0
                turn_began = time.perf_counter()
                piece = next(chunks, None)
                if first_turn and piece is not None:
                    took = time.perf_counter() - turn_began
                    self._first_turn_s = 0.7 * (self._first_turn_s or took) + 0.3 * took
                    first_turn = False
                if piece is None:
                    break
                emit, hold, joins, last = piece
                converting = time.perf_counter()
                pcm = to_pcm(emit)  # copy out before the buffer is reused
                if len(hold):
                    held.append(to_pcm(hold))
                if self.stages is not None:
                    self.stages.pcm_s += time.perf_counter() - converting
            if join.tail is not None and len(pcm):
                # The first sound of a unit that continues a cut one: crossfade the cut's
                # held tail in, or fade it out where this unit could not take context.
                tail = join.tail if joins else fade_out(join.tail)
                pcm = crossfade(tail, pcm) if joins else np.concatenate([tail, pcm])
                join.tail = None
            if len(pcm):  # else all of it is held for the next unit's crossfade
                pace.made(len(pcm) / rate)
                spent = time.perf_counter() - started
                if key is not None:
                    pieces.append(pcm)
                yield AudioChunk(pcm, rate, index, spent)
                started = time.perf_counter()  # time the consumer held us is not compute
            if last:
                # Ended without queueing for a turn that would only find the unit done:
                # that wait came just when the next unit's frontend was due.
                next(chunks, None)
                break
        if held and not stop.stopped:
            join.tail, join.index = np.concatenate(held), index
        if cache is not None and key is not None and pieces and not stop.stopped:
            cache.put(key, np.concatenate(pieces), pinned=cache_use == "pin")

    def _unit_chunks(
        self,
        clause: str,
        before: str,
        after: str,
        options: SynthesisOptions,
        sid: int | None,
        first_step: int,
        pace: Pace,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, bool, bool]]:
        """A unit's chunks as (emit, hold, crossfades with a held tail, last), float views;
        the caller holds a turn per next(), so the frontend runs inside the first one.
        After the last chunk no session runs: the caller ends the unit without a turn."""
        clock = StageTimes()
        if before or after:
            started = time.perf_counter()
            ids, start, stop = self.phonemizer.ids_in_context(clause, before, after)
            clock.phonemize_s = time.perf_counter() - started
            if len(ids) <= MAX_UNIT_IDS + CONTEXT_IDS:
                started = time.perf_counter()
                prior, mask, durations = self._prior(ids, options, durations=True)
                assert durations is not None
                clock.frontend_s = time.perf_counter() - started
                clock.ids, clock.own_ids = len(ids), stop - start
                frames = prior.shape[2]
                if int(durations.sum()) == frames:
                    lo, hi = int(durations[:start].sum()), int(durations[:stop].sum())
                    hop = self.voice.hop_length
                    span = unit_span(frames, lo, hi, hop, bool(before), bool(after))
                    crop = SampleCrop(span)
                    keep = (span.decode_from, span.decode_to)
                    # The flow runs only over the frames the windows read: not over the
                    # context words' own.
                    reads = (span.decode_from - self.context, span.decode_to + self.context)
                    z = self._latent(prior, mask, reads, small_first=first_step == 0)
                    first_audio = self._first_audio_s(first_step, clock.frontend_s, pace)
                    windows = self.decoder.plan(frames, first_step, keep, pace.ahead_s, first_audio)
                    chunks = self.decoder.decode_windows(z, windows, sid)
                    chars = len(before + clause + after)
                    timed = self._timed(chunks, clock, span.decode_to - span.decode_from, z)
                    for made, audio in enumerate(timed, start=1):
                        if chars:  # the unit's first turn: its frontend, the whole flow
                            self._frontend_took(clock.frontend_s + _whole_flow_s(z), chars)
                            chars = 0
                        yield *crop.take(audio), span.joins_previous, made == len(windows)
                    return
                self._frontend_took(clock.frontend_s, len(before + clause + after))
        last_step = len(self.config.schedule) - 1
        started = time.perf_counter()
        parts = self.phonemizer.clause_id_parts(clause)  # a runaway unit in bounded parts
        clock.phonemize_s += time.perf_counter() - started
        for part, ids in enumerate(parts):
            started = time.perf_counter()
            prior, mask, _ = self._prior(ids, options, durations=False)
            clock.frontend_s += time.perf_counter() - started
            clock.ids += len(ids)
            clock.own_ids += len(ids)
            step = first_step if part == 0 else last_step
            z = self._latent(prior, mask, (0, prior.shape[2]), small_first=step == 0)
            first_audio = self._first_audio_s(step, clock.frontend_s, pace)
            windows = self.decoder.plan(z.shape[2], step, None, pace.ahead_s, first_audio)
            chunks = self.decoder.decode_windows(z, windows, sid)
            timed = self._timed(chunks, clock, z.shape[2], z)
            for made, audio in enumerate(timed, start=1):
                yield audio, audio[:0], False, made == len(windows) and part == len(parts) - 1
            clock = StageTimes()  # recorded; the next part starts its own

    def _first_audio_s(self, first_step: int, frontend_s: float, pace: Pace) -> float:
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
        turn_s = self._first_turn_s
        if turn_s is None:
            per_frame = self.decoder.seconds_per_frame or 0.0
            turn_s = frontend_s + per_frame * (self.config.schedule[0] + self.context)
        return GUARD_S + math.ceil(others / self.turns.lanes) * turn_s

    def _frontend_took(self, seconds: float, chars: int) -> None:
        """Follow the lane's measured frontend speed (a moving average: load varies)."""
        lane = self.turns.lane()
        rates = self._frontend_s_per_char
        rates[lane] = 0.7 * rates[lane] + 0.3 * seconds / max(chars, 1)

    def _timed(
        self,
        chunks: Iterator[np.ndarray],
        clock: StageTimes,
        frames: int,
        z: np.ndarray | FlowLatent,
    ) -> Iterator[np.ndarray]:
        """Decoder time and frames into the attached profile (when there is one); the
        flow runs inside the decoder's windows but counts as frontend."""
        if self.stages is None:
            yield from chunks
            return
        fed = self.decoder.frames_fed
        while True:
            started = time.perf_counter()
            audio = next(chunks, None)
            clock.decoder_s += time.perf_counter() - started
            if audio is None:
                break
            yield audio
        clock.decoder_s -= _flow_s(z)
        clock.frontend_s += _flow_s(z)
        clock.frames += frames
        clock.decoded_frames += self.decoder.frames_fed - fed
        if self.stages is not None:
            self.stages.add(clock)

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
        options = options or SynthesisOptions()
        stop = stop or StopToken()
        pace = Pace(priority)
        join = _Join()
        expand = Expander(self.voice.sample_rate) if self.expands else None
        for index, clause in enumerate(clauses, start=first_index):
            if stop.stopped:
                return
            for chunk in self._clause_audio(clause, index, options, stop, cache_use, pace, join):
                yield self._expanded(chunk, expand)
        if not stop.stopped and (flushed := join.flush(self.voice.sample_rate)) is not None:
            yield self._expanded(flushed, expand)

    def _expanded(self, chunk: AudioChunk, expand: Expander | None) -> AudioChunk:
        """The chunk through the stream's expander (INT8 with it on), in time order."""
        if expand is None:
            return chunk
        started = time.perf_counter()
        chunk.pcm = expand(chunk.pcm)  # a copy: a cached phrase's samples stay as stored
        if self.stages is not None:
            self.stages.pcm_s += time.perf_counter() - started
        return chunk

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
        for lane, frontend in enumerate(self._frontends):
            for sentence in WARM_TEXTS:
                for clause in self.clauses(sentence):
                    ids = self.phonemizer.clause_ids(clause)
                    began = time.perf_counter()
                    prior, mask, _ = self._prior(ids, quiet, durations=False, frontend=frontend)
                    if mask is not None:  # the flow, whole and over a first window
                        self._flow_on(lane, prior, mask)
                    spent = time.perf_counter() - began  # a later unit's first turn
                    if mask is not None:
                        first = min(64, prior.shape[2])
                        self._flow_on(lane, prior[:, :, :first], mask[:, :, :first])
            self._frontend_s_per_char[lane] = spent / len(clause)  # the longest, warm
        self.decoder.warm(self.voice.speaker_id(None))
        return (time.perf_counter() - started) * 1000

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


def _flow_s(z: np.ndarray | FlowLatent) -> float:
    """Seconds the flow has run for this latent (0 for z from a whole frontend)."""
    return z.spent_s if isinstance(z, FlowLatent) else 0.0


def _whole_flow_s(z: np.ndarray | FlowLatent) -> float:
    """Seconds the flow takes over all this latent's reads (0 from a whole frontend)."""
    return z.whole_s() if isinstance(z, FlowLatent) else 0.0
