"""One stream's units made into audio: each from the phrase cache, or from its frontend
and the chunked decoder a turn per window, joined to the unit before where a cut unit
goes on. The sessions, turns, cache and timings are the synthesizer's, shared by every
stream (synth.py); what is the stream's own travels in `Stream`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TextError
from ..text.phonemize import MAX_UNIT_IDS
from ..text.segment import context_of, prosody_of
from ..values import AudioChunk, StageTimes, StopToken, SynthesisOptions, WordTime, to_pcm
from .config import CacheUse
from .expander import Expander
from .latent import FlowLatent
from .seam import SampleCrop, crossfade, fade_out, unit_span
from .timing import from_durations, shown_words, spread, with_marks
from .turns import Pace

if TYPE_CHECKING:
    from .synth import StreamingSynthesizer

Prior = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]  # synth.prior's
AheadKey = tuple[tuple[int, ...], SynthesisOptions, bool]  # its ids, options, durations
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # SynthesisOptions' bounds
CONTEXT_IDS = 80  # room for the context words of a cut unit beyond MAX_UNIT_IDS


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


@dataclass
class Stream:
    """One stream of units (a `stream_clauses` call): its options and stop token, how it
    uses the phrase cache, its pace among the streams taking turns, the held tail of a
    unit cut mid-sentence, and its expander (INT8 with it on)."""

    synth: StreamingSynthesizer
    options: SynthesisOptions
    stop: StopToken
    cache_use: CacheUse
    pace: Pace
    expand: Expander | None
    join: _Join = field(default_factory=_Join)
    delivered: int = 0  # samples yielded so far: where the next unit's words start
    unit_words: list[WordTime] | None = None  # the unit's, relative to its audio
    sid: int | None = None  # the options' speaker, resolved as each unit is synthesized
    # The next units (index, text), where the text is known: their encoders run ahead,
    # beside this unit's decoding (look_ahead), by their inputs.
    upcoming: list[tuple[int, str]] = field(default_factory=list)
    ahead: dict[AheadKey, Future[Prior]] = field(default_factory=dict)
    looked: set[int] = field(default_factory=set)  # the units whose encoder was started
    ran_ahead: bool = False  # the unit's encoder ran ahead: its time is not the lane's speed

    def clause_audio(self, clause: str, index: int) -> Iterator[AudioChunk]:
        """The audio of the utterance's unit `index`, spoken as its prosody says (SSML):
        silence before and after it (yielded at once: a break never waits for the next
        unit's frontend), its rate on the speed, its gain on the samples."""
        prosody = prosody_of(clause)
        rate = self.synth.voice.sample_rate
        if prosody.pause_s > 0 and not self.stop.stopped:
            yield self._silence(prosody.pause_s, index)
        self.unit_words = None
        timed = False
        for chunk in self._unit_audio(clause, index, self.unit_options(clause)):
            if prosody.gain != 1.0:
                gained = chunk.pcm.astype(np.float32) * prosody.gain
                chunk.pcm = np.clip(np.rint(gained), -32768, 32767).astype(np.int16)
            if not timed and chunk.clause_index == index:  # the unit's first own audio
                timed = True
                words = self.unit_words if self.unit_words is not None else []
                words = with_marks(words, prosody, 0.0)
                chunk.words = [w.shifted(self.delivered / rate) for w in words]
            yield chunk
            self.delivered += len(chunk.pcm)
        if prosody.tail_s > 0 and not self.stop.stopped:
            yield self._silence(prosody.tail_s, index)

    def unit_options(self, clause: str) -> SynthesisOptions:
        """The stream's options at the unit's rate (SSML prosody)."""
        rate = prosody_of(clause).rate
        if rate == 1.0:
            return self.options
        speed = min(max(self.options.speed * rate, MIN_SPEED), MAX_SPEED)
        return replace(self.options, speed=speed)

    def look_ahead(self) -> None:
        """Start the upcoming units' encoders and flows now, in turn, beside this unit's
        decoding, where the stream is alone on a CPU with worker lanes: its decoding
        fills both cores (decoder.py, parts), and the frontend, which a second thread
        speeds up least, takes a third thread instead of turns of its own. Run on a
        worker lane's one-thread sessions (onnxruntime runs a session from several
        threads safely)."""
        synth = self.synth
        pending = [(i, clause) for i, clause in self.upcoming if i not in self.looked]
        # Called after every chunk: nothing to start is the common case, and asks no lock.
        if not pending or synth.lookahead is None or self.stop.stopped:
            return
        if synth.turns.others(self.pace):
            return
        for index, clause in pending:
            self.looked.add(index)
            options = self.unit_options(clause)
            try:
                ids, durations, in_context = self._first_inputs(clause)
            except TextError:
                continue  # said in the unit's own turn, after this unit's audio
            if not in_context and self._cached(clause, options):
                continue
            # The flow too, unless the unit is cut from a sentence: it reads only the
            # unit's own frames of the words around it.
            self.ahead[(tuple(ids), options, durations)] = synth.lookahead.submit(
                synth.prior_ahead, ids, options, durations, not in_context
            )

    def _cached(self, clause: str, options: SynthesisOptions) -> bool:
        """Whether the phrase cache holds the unit's audio (it needs no frontend)."""
        synth, cache = self.synth, self.synth.phrase_cache
        if cache is None or self.cache_use == "bypass":
            return False
        return cache.holds(cache.key(synth.voice, synth.sessions.precisions_key, options, clause))

    def cancel_ahead(self) -> None:
        """Drop the frontends started ahead that have not begun (the stream has ended):
        they would hold the look-ahead thread from the next stream."""
        for run in self.ahead.values():
            run.cancel()
        self.ahead.clear()

    def _first_inputs(self, clause: str) -> tuple[list[int], bool, bool]:
        """The ids of the unit's first encoder run, whether it reads durations, and
        whether they include the words around the unit, as unit_chunks makes them."""
        synth = self.synth
        in_context = self._in_context(clause, *self._context(clause))
        if in_context is not None:
            return in_context[0], True, True
        first = synth.phonemizer.clause_id_parts(clause)[0]
        return first, synth.durations_name is not None, False

    def _context(self, clause: str) -> tuple[str, str]:
        """The words before and after a unit cut from its sentence, where the voice tells
        durations (to crop the unit's own audio from them); else none."""
        return context_of(clause) if self.synth.durations_name else ("", "")

    def _in_context(
        self, clause: str, before: str, after: str
    ) -> tuple[list[int], int, int] | None:
        """A cut unit's ids with the words around it, and where its own start and stop;
        None where it has no such words or with them it would be too long."""
        if not (before or after):
            return None
        ids, start, stop = self.synth.phonemizer.ids_in_context(clause, before, after)
        return (ids, start, stop) if len(ids) <= MAX_UNIT_IDS + CONTEXT_IDS else None

    def _prior(self, ids: list[int], options: SynthesisOptions, durations: bool) -> Prior:
        """The encoder's output for these ids: the run started ahead where it was for
        them, else a run now on the calling turn's lane."""
        run = self.ahead.pop((tuple(ids), options, durations), None)
        self.ran_ahead = run is not None
        prior = run.result() if run is not None else self.synth.prior(ids, options, durations)
        # The next units' encoders run while this one decodes (from the first unit on:
        # phonemizing them takes ~0.1 ms each; started after the first sound instead,
        # the long text measured 3-5 % slower).
        self.look_ahead()
        return prior

    def _silence(self, seconds: float, index: int) -> AudioChunk:
        rate = self.synth.voice.sample_rate
        self.pace.made(seconds)
        samples = round(seconds * rate)
        self.delivered += samples  # counted here: no word rides on silence
        return AudioChunk(np.zeros(samples, np.int16), rate, index)

    def _words(
        self, clause: str, before: str, durations: np.ndarray, origin: float, ids: int
    ) -> None:
        """The unit's word times from its durations (timing.py); `origin`: the frame its
        audio starts at; `ids`: all its ids, where it was cut into parts."""
        synth = self.synth
        spans, first = synth.phonemizer.word_spans(clause, before)
        per_frame = synth.voice.hop_length / synth.voice.sample_rate
        words = shown_words(clause)
        if ids > len(durations):  # a runaway unit in parts: spread over its estimate
            estimate = float(durations.sum()) * ids / max(len(durations), 1) * per_frame
            self.unit_words = spread(words, 0.0, estimate)
            return
        sizes = None
        if len(words) != len(spans):  # espeak joined or split words: align by phonemes
            sizes = [len(synth.phonemizer.phonemes(w)) for w in words]
        self.unit_words = from_durations(words, spans, durations, first, origin, per_frame, sizes)

    def _unit_audio(
        self, clause: str, index: int, options: SynthesisOptions
    ) -> Iterator[AudioChunk]:
        """The unit's own audio: its cached phrase, or a turn a window."""
        synth, pace, join = self.synth, self.pace, self.join
        rate = synth.voice.sample_rate
        before, after = self._context(clause)
        if not before and (flushed := join.flush(rate)) is not None:
            yield flushed  # this unit does not continue the cut one
        # A cut unit's audio depends on its neighbours: it is not a phrase to cache.
        cache = synth.phrase_cache if self.cache_use != "bypass" and not (before or after) else None
        key = (
            cache.key(synth.voice, synth.sessions.precisions_key, options, clause)
            if cache
            else None
        )
        if cache is not None and key is not None:
            started = time.perf_counter()
            cached = cache.get(key)
            if cached is not None:
                spent = time.perf_counter() - started
                pace.made(len(cached) / rate)
                known = synth.phrase_words.get(key)
                self.unit_words = known or spread(shown_words(clause), 0.0, len(cached) / rate)
                yield AudioChunk(cached, rate, index, spent, cached=True)
                return
            if not cache.wants(key, marked=self.cache_use in ("keep", "pin")):
                key = None
        started = time.perf_counter()
        self.sid = synth.voice.speaker_id(options.speaker)
        pieces: list[np.ndarray] = []
        held: list[np.ndarray] = []
        # Only an utterance's first clause needs a small first chunk: later clauses are
        # made while earlier audio plays, and larger windows waste less on context.
        first_step = 0 if index == 0 else len(synth.config.schedule) - 1
        chunks = self.unit_chunks(clause, before, after, first_step, options)
        # The first turn runs the unit's frontend: ask for it that much before running dry.
        pace.need_s = max(synth.frontend_s_per_char) * len(before + clause + after)
        first_turn = pace.first_at is None  # this turn makes the stream's first sound
        while not self.stop.stopped:
            # One thread does a first turn as fast as two, and leaves a core to a stream
            # arriving meanwhile (turns.py).
            with synth.turns.turn(pace, narrow=first_turn):
                pace.need_s = 0.0
                turn_began = time.perf_counter()
                piece = next(chunks, None)
                if first_turn and piece is not None:
                    took = time.perf_counter() - turn_began
                    synth.first_turn_s = 0.7 * (synth.first_turn_s or took) + 0.3 * took
                    first_turn = False
                if piece is None:
                    break
                emit, hold, joins, last = piece
                converting = time.perf_counter()
                pcm = to_pcm(emit)  # copy out before the buffer is reused
                if len(hold):
                    held.append(to_pcm(hold))
                if synth.stages is not None:
                    synth.stages.pcm_s += time.perf_counter() - converting
            if join.tail is not None and len(pcm):
                # The first sound of a unit that continues a cut one: crossfade the cut's
                # held tail in, or fade it out where this unit could not take context.
                tail = join.tail if joins else fade_out(join.tail)
                pcm = crossfade(tail, pcm) if joins else np.concatenate([tail, pcm])
                join.tail = None
            if len(pcm):  # else all of it is held for the next unit's crossfade
                pace.made(len(pcm) / rate)
                self.look_ahead()  # where other streams held it back before
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
        if held and not self.stop.stopped:
            join.tail, join.index = np.concatenate(held), index
        if cache is not None and key is not None and pieces and not self.stop.stopped:
            cache.put(key, np.concatenate(pieces), pinned=self.cache_use == "pin")
            if self.unit_words is not None:
                synth.remember_words(key, self.unit_words)

    def unit_chunks(
        self, clause: str, before: str, after: str, first_step: int, options: SynthesisOptions
    ) -> Iterator[tuple[np.ndarray, np.ndarray, bool, bool]]:
        """A unit's chunks as (emit, hold, crossfades with a held tail, last), float views;
        the caller holds a turn per next(), so the frontend runs inside the first one.
        After the last chunk no session runs: the caller ends the unit without a turn."""
        synth, pace = self.synth, self.pace
        clock = StageTimes()
        started = time.perf_counter()
        in_context = self._in_context(clause, before, after)
        clock.phonemize_s = time.perf_counter() - started
        if in_context is not None:
            ids, start, stop = in_context
            started = time.perf_counter()
            prior, mask, durations = self._prior(ids, options, True)
            assert durations is not None
            clock.frontend_s = time.perf_counter() - started
            clock.ids, clock.own_ids = len(ids), stop - start
            frames = prior.shape[2]
            if int(durations.sum()) == frames:
                lo, hi = int(durations[:start].sum()), int(durations[:stop].sum())
                hop = synth.voice.hop_length
                span = unit_span(frames, lo, hi, hop, bool(before), bool(after))
                origin = lo - (0.5 if span.joins_previous else 0.0)  # half a frame
                self._words(clause, before, durations, origin, len(ids))
                crop = SampleCrop(span)
                keep = (span.decode_from, span.decode_to)
                # The flow runs only over the frames the windows read: not over the
                # context words' own.
                reads = (span.decode_from - synth.context, span.decode_to + synth.context)
                z = synth.windowed_latent(prior, mask, reads, small_first=first_step == 0)
                first_audio = synth.first_audio_s(first_step, clock.frontend_s, pace)
                windows = synth.decoder.plan(frames, first_step, keep, pace.ahead_s, first_audio)
                chunks = synth.decoder.decode_windows(z, windows, self.sid)
                chars = len(before + clause + after)
                timed = self._timed(chunks, clock, span.decode_to - span.decode_from, z)
                for made, audio in enumerate(timed, start=1):
                    if chars and not self.ran_ahead:  # its first turn: frontend, flow
                        synth.frontend_took(clock.frontend_s + _whole_flow_s(z), chars)
                        chars = 0
                    yield *crop.take(audio), span.joins_previous, made == len(windows)
                return
            if not self.ran_ahead:
                synth.frontend_took(clock.frontend_s, len(before + clause + after))
        last_step = len(synth.config.schedule) - 1
        started = time.perf_counter()
        parts = synth.phonemizer.clause_id_parts(clause)  # a runaway unit in bounded parts
        clock.phonemize_s += time.perf_counter() - started
        for part, ids in enumerate(parts):
            started = time.perf_counter()
            timing = part == 0 and synth.durations_name is not None
            prior, mask, durations = self._prior(ids, options, timing)
            clock.frontend_s += time.perf_counter() - started
            if durations is not None:
                self._words(clause, "", durations, 0.0, sum(len(p) for p in parts))
            clock.ids += len(ids)
            clock.own_ids += len(ids)
            step = first_step if part == 0 else last_step
            z = synth.windowed_latent(prior, mask, (0, prior.shape[2]), small_first=step == 0)
            first_audio = synth.first_audio_s(step, clock.frontend_s, pace)
            windows = synth.decoder.plan(z.shape[2], step, None, pace.ahead_s, first_audio)
            chunks = synth.decoder.decode_windows(z, windows, self.sid)
            timed = self._timed(chunks, clock, z.shape[2], z)
            for made, audio in enumerate(timed, start=1):
                yield audio, audio[:0], False, made == len(windows) and part == len(parts) - 1
            clock = StageTimes()  # recorded; the next part starts its own

    def _timed(
        self,
        chunks: Iterator[np.ndarray],
        clock: StageTimes,
        frames: int,
        z: np.ndarray | FlowLatent,
    ) -> Iterator[np.ndarray]:
        """Decoder time and frames into the attached profile (when there is one); the
        flow runs inside the decoder's windows but counts as frontend."""
        synth = self.synth
        if synth.stages is None:
            yield from chunks
            return
        fed = synth.decoder.frames_fed
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
        clock.decoded_frames += synth.decoder.frames_fed - fed
        if synth.stages is not None:
            synth.stages.add(clock)

    def expanded(self, chunk: AudioChunk) -> AudioChunk:
        """The chunk through the stream's expander (INT8 with it on), in time order."""
        if self.expand is None:
            return chunk
        started = time.perf_counter()
        chunk.pcm = self.expand(chunk.pcm)  # a copy: a cached phrase's samples stay as stored
        if self.synth.stages is not None:
            self.synth.stages.pcm_s += time.perf_counter() - started
        return chunk


def _flow_s(z: np.ndarray | FlowLatent) -> float:
    """Seconds the flow has run for this latent (0 for z from a whole frontend)."""
    return z.spent_s if isinstance(z, FlowLatent) else 0.0


def _whole_flow_s(z: np.ndarray | FlowLatent) -> float:
    """Seconds the flow takes over all this latent's reads (0 from a whole frontend)."""
    return z.whole_s() if isinstance(z, FlowLatent) else 0.0
