"""Chunked vocoder: decode windows of z with context on both sides, crop, concatenate.

The vocoder is convolutional, so a window that carries enough frames of context on each
side reproduces the full decode of its core exactly (to float noise at its receptive field,
graph.receptive_frames). Window lengths come from a small fixed set (one per schedule
step), so sessions can be warmed on every shape they will see and output buffers
preallocated once.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from ..runtime import device_type
from .turns import PRIMARY

DEFAULT_SCHEDULE = (16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT = 16  # where the graph does not tell its receptive field
# Between the schedule's lengths, buckets every BUCKET_STEP frames: a window (a tail, a
# later unit) takes the smallest bucket holding it, so coarse buckets decode many frames
# twice (26 % beyond the audio on typical units with the schedule's 11 lengths, 19 % with
# these 18; every 32 frames gives 18 % for a third more warm-up). Each is warmed at start.
BUCKET_STEP = 64
# A window after the first may take this share of the audio already made to decode: the
# rest is margin for other streams' turns (turns.py) and for a busy board. Measured, one
# stream: 0.5 decodes the short / medium bench texts in 12 % / 9 % fewer frames than 0.25
# (a unit's rest after its first chunk in one window, not two), 0.91x / 0.94x the time
# (paired); 0.75 no fewer frames. While others wait, 0.5 made longer turns: ten HTTP
# streams ran dry 11/20 times against 2-5/20 with 0.25.
AFFORD_SHARE = 0.5
AFFORD_SHARE_CONTENDED = 0.25
# A lone stream's window (primary lane) is cut into one part per worker lane, decoded side
# by side, where each part keeps at least this many frames: the worker lanes' one-thread
# sessions run the float convs blocked (precision.py), and two of them side by side beat
# one two-thread session by more than a part's extra context costs.
SPLIT_MIN_CORE = 64


@dataclass(frozen=True)
class Window:
    start: int  # first frame fed to the decoder
    stop: int  # one past the last frame fed
    keep_from: int  # first frame of the core (audio kept)
    keep_to: int  # one past the last core frame


def plan_windows(
    frames: int,
    schedule: tuple[int, ...],
    context: int,
    first_step: int = 0,
    keep: tuple[int, int] | None = None,
    affordable: Callable[[int], int] | None = None,
    contended: bool = False,
    ahead: int = 0,
    first_core: int = 0,
) -> Iterator[Window]:
    """Windows covering [0, frames) with growing cores, every one a warmed bucket length.

    keep=(lo, hi) covers only those frames; the frames outside serve as context (a unit
    spoken with words around it, cropped to its own).

    first_step > 0 starts further along the schedule: later clauses of an utterance are
    decoded while earlier audio plays, so they need no small first chunk. A window never
    has an unwarmed length (on CUDA that is a cuDNN search, on TensorRT an engine rebuild
    mid-utterance): it takes the smallest bucket that holds its core and context, slid
    left over real frames, which only adds context and stays exact. Only a unit shorter
    than that bucket gets `stop > frames`: the caller pads z at the end (edge frames).
    That is not exact for the last frames (the vocoder's own zero padding differs), but
    measured at 83-91 dB SNR against a full decode (edge frames beat zeros by 4 dB), and
    only units under 64 frames (0.74 s) ever need it.

    affordable(frames_ahead) -> the largest core the decoder can make while that much
    audio plays (from its measured speed): where it exceeds the schedule's next core, the
    window grows to it. Fewer, larger windows decode fewer context frames twice; a slow
    decoder keeps the schedule's doubling. A later unit (first_step > 0) is decoded in
    one window where that decodes fewer frames, unless other streams wait (`contended`):
    a long turn would delay their sound.

    `first_core` (frames) is the least audio an utterance's first window must make
    (first_step 0): while other streams wait for their first sound, a stream whose first
    chunk is short turns urgent at once and takes a second turn before they start. The
    window takes the smallest bucket that holds it; later windows continue the schedule
    beyond it.

    `ahead` is the audio (in frames) the stream has made beyond its playback clock when
    the unit starts. While other streams wait, a later unit starts at the schedule's
    step its budget affords (never below the first core) instead of its largest core:
    one turn of a 512-frame core on a one-thread lane takes ~0.6 s, longer than the
    audio other streams have ahead, and they run dry while it decodes.
    """
    lo, hi = keep if keep is not None else (0, frames)
    buckets = bucket_lengths(schedule, context)
    if first_step > 0 and contended and affordable is not None:
        budget = max(schedule[0], affordable(ahead))
        first_step = min(first_step, len(schedule) - 1)
        while first_step > 0 and schedule[first_step] > budget:
            first_step -= 1
    first = first_core if first_step == 0 else 0
    planned = list(
        _plan(frames, schedule, context, first_step, lo, hi, buckets, affordable, ahead, first)
    )
    whole = _bucket(buckets, lo, hi, frames, context)
    if first_step > 0 and not contended and len(planned) > 1 and whole is not None:
        # A later unit (audio already playing) in one window where that decodes fewer
        # frames: a bucket of real frames, or padding its end by less than a step.
        decoded = sum(w.stop - w.start for w in planned)
        if whole < decoded and _pads_little(whole, frames, ends_unit=hi == frames):
            start = max(0, min(lo - min(context, lo), frames - whole))
            planned = [Window(start, start + whole, lo, hi)]
    yield from planned


def _plan(
    frames: int,
    schedule: tuple[int, ...],
    context: int,
    first_step: int,
    lo: int,
    hi: int,
    buckets: list[int],
    affordable: Callable[[int], int] | None,
    ahead: int = 0,
    first_core: int = 0,
) -> Iterator[Window]:
    last = len(schedule) - 1
    step = min(first_step, last)
    # A unit shorter than the step's first window starts at a smaller step, so it is cut
    # into buckets of real frames instead of padded far past its end.
    while step > 0 and window_length(schedule[step], context, first=True) > frames:
        step -= 1
    if first_core > schedule[step]:  # the core of the least bucket of real frames that holds it
        cores = [b - context for b in buckets if b <= frames]
        first_core = next((c for c in cores if c >= first_core), max(cores, default=0))
        first_core = max(first_core, schedule[step])
        step = next((i for i, c in enumerate(schedule) if c > first_core), last + 1) - 1
    else:
        first_core = 0
    core_start = lo
    while core_start < hi:
        core = first_core if first_core and core_start == lo else schedule[min(step, last)]
        if affordable is not None and core_start > lo:  # never the first, small window
            afford = affordable(ahead + core_start - lo)
            core = _grown(core, afford, core_start, hi, frames, context, buckets)
        core_stop = min(hi, core_start + core)
        length = _bucket(buckets, core_start, core_stop, frames, context)
        assert length is not None  # a schedule core plus context is a bucket by definition
        if core_stop < hi:
            # Fold a small tail (under a quarter core) into this window when that decodes
            # no more frames than a separate tail window and pads nothing; a free fold always.
            folded = _bucket(buckets, core_start, hi, frames, context)
            tail = _bucket(buckets, core_stop, hi, frames, context)
            small = hi - core_stop <= core // 4
            if (
                folded is not None
                and tail is not None
                and (folded <= frames or length > frames)
                and (folded == length or (small and folded <= length + tail))
            ):
                core_stop, length = hi, folded
        start = max(0, min(core_start - min(context, core_start), frames - length))
        yield Window(start, start + length, core_start, core_stop)
        core_start, step = core_stop, step + 1


def _grown(
    core: int, afford: int, core_start: int, hi: int, frames: int, context: int, buckets: list[int]
) -> int:
    """The largest core up to `afford` whose window pads little (`_pads_little`); the
    schedule's core where none beats it."""
    best = core
    left = min(context, core_start)
    for length in (b for b in buckets if b < frames + BUCKET_STEP):
        grown = min(hi - core_start, length - left - context, afford)
        if grown <= best:
            continue
        window = _bucket(buckets, core_start, core_start + grown, frames, context)
        ends_unit = core_start + grown == hi == frames
        if window is not None and _pads_little(window, frames, ends_unit):
            best = grown
    return best


def _pads_little(length: int, frames: int, ends_unit: bool) -> bool:
    """A window of real frames, or one ending the unit that pads it by less than
    BUCKET_STEP frames (edge padding: 83-91 dB SNR, below one LSB of 16-bit audio)."""
    return length <= frames or (ends_unit and length - frames < BUCKET_STEP)


def _bucket(
    buckets: list[int], core_start: int, core_stop: int, frames: int, context: int
) -> int | None:
    """Smallest bucket holding the core and the context available on each side."""
    need = core_stop - core_start + min(context, core_start) + min(context, frames - core_stop)
    return next((b for b in buckets if b >= need), None)


def window_length(core: int, context: int, first: bool) -> int:
    return core + context if first else core + 2 * context


def bucket_lengths(schedule: tuple[int, ...], context: int) -> list[int]:
    lengths = {window_length(core, context, first=True) for core in schedule}
    lengths.update(window_length(core, context, first=False) for core in schedule)
    lengths.update(range(BUCKET_STEP, max(lengths) + 1, BUCKET_STEP))
    return sorted(lengths)


Buffers = tuple[ort.IOBinding, np.ndarray, ort.OrtValue, np.ndarray]


class ChunkedDecoder:
    """Warm decoder sessions with preallocated input/output buffers per bucket: the
    primary session and, optionally, worker sessions (lanes, turns.py) that decode other
    streams' windows side by side; `lane()` says which one the calling turn holds."""

    def __init__(
        self,
        session: ort.InferenceSession,
        provider: str,
        hop: int,
        schedule: tuple[int, ...] = DEFAULT_SCHEDULE,
        context: int = DEFAULT_CONTEXT,
        sample_rate: int = 22050,
        workers: Sequence[ort.InferenceSession] = (),
    ) -> None:
        self.session = session
        self.sessions = [session, *workers]
        self.lane: Callable[[], int] = lambda: 0
        self.hop = hop
        self.frame_s = hop / sample_rate  # audio per latent frame
        self._seconds_per_frame: list[float | None] = [None] * len(self.sessions)
        # Streams waiting for a turn on this decoder (set by the synthesizer): a larger
        # window would delay their first sound, so it shares the budget with them.
        self.waiting: Callable[[], int] = lambda: 0
        self.schedule = schedule
        self.context = context
        self.device = device_type(provider)
        inputs = session.get_inputs()
        self.latent_name = inputs[0].name
        self.channels = int(inputs[0].shape[1])
        self.has_speaker = any(i.name == "sid" for i in inputs)
        self.output_name = session.get_outputs()[0].name
        self.output_rank = len(session.get_outputs()[0].shape)
        self.frames_fed = 0  # latent frames decoded so far, context included (profile)
        lengths = bucket_lengths(schedule, context)
        self._buffers: list[dict[int, Buffers]] = [
            {length: self._bind(lane, length) for length in lengths} for lane in self.sessions
        ]
        # Lone streams' windows in parts on the worker lanes (CPU, two lanes or more):
        # idle then, as the primary lane runs alone (turns.py).
        self.split_parts = len(workers) if self.device == "cpu" and len(workers) >= 2 else 0
        self._helpers = (
            ThreadPoolExecutor(self.split_parts - 1, thread_name_prefix="decoder-part")
            if self.split_parts
            else None
        )

    @property
    def seconds_per_frame(self) -> float | None:
        """Decode cost per frame in the calling turn's lane, measured by warm()."""
        return self._seconds_per_frame[self.lane()]

    def lane_rtf(self, lane: int) -> float | None:
        """Decode seconds per second of audio in `lane` (warm-up), on the largest window
        with its context: what a stream's later units cost there."""
        per_frame = self._seconds_per_frame[lane]
        if per_frame is None:
            return None
        largest = max(self._buffers[lane])
        return per_frame * largest / max(largest - 2 * self.context, 1) / self.frame_s

    def _bind(self, session: ort.InferenceSession, frames: int) -> Buffers:
        host_in = np.zeros((1, self.channels, frames), dtype=np.float32)
        out_shape = (1,) * (self.output_rank - 1) + (frames * self.hop,)
        host_out = np.zeros(out_shape, dtype=np.float32)
        # On CPU the OrtValues wrap these arrays, so inputs are filled and outputs read in
        # place; on a GPU they live on the device and only the window crosses the bus.
        value_in = ort.OrtValue.ortvalue_from_numpy(host_in, self.device, 0)
        value_out = ort.OrtValue.ortvalue_from_numpy(host_out, self.device, 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input(self.latent_name, value_in)
        binding.bind_ortvalue_output(self.output_name, value_out)
        return binding, host_in, value_out, host_out.reshape(-1)

    def warm(self, sid: int | None = None) -> None:
        chosen = self.lane
        try:
            for lane in range(len(self.sessions)):
                self.lane = lambda lane=lane: lane
                self._warm_lane(lane, sid)
        finally:
            self.lane = chosen

    def _warm_lane(self, lane: int, sid: int | None) -> None:
        # The primary lane runs every bucket (on a GPU each new shape is a cuDNN search
        # or an engine build). Worker lanes exist only on CPU, where a new shape costs
        # just allocations, and the largest bucket's leave the arena room for every
        # smaller one: running each bucket there would take ~5 s per single-threaded lane.
        largest = max(self._buffers[lane])
        for length in self._buffers[lane] if lane == 0 else ():
            self.decode(np.zeros((1, self.channels, length), np.float32), sid)
        # Timed once warm: the decoder's speed per frame, for the window sizes it can
        # afford while audio plays (the first runs include one-time allocation).
        timings = []
        for _ in range(2):  # the faster of two: a busy moment at start is not its speed
            started = time.perf_counter()
            self.decode(np.zeros((1, self.channels, largest), np.float32), sid)
            timings.append(time.perf_counter() - started)
        self._seconds_per_frame[lane] = min(timings) / largest

    def affordable_core(self, frames_ahead: int) -> int:
        """Largest core whose window decodes in a share of the audio already made (a
        smaller one while other streams wait), split among the streams waiting."""
        if not self.seconds_per_frame:
            return 0
        waiting = self.waiting()
        share = AFFORD_SHARE_CONTENDED if waiting else AFFORD_SHARE
        budget_s = share * frames_ahead * self.frame_s / (1 + waiting)
        return int(budget_s / self.seconds_per_frame) - 2 * self.context

    def decode(self, z: np.ndarray, sid: int | None = None) -> np.ndarray:
        """Decode a [1, C, frames] latent window to float audio (1-D view) in the calling
        turn's lane."""
        return self._decode_on(self.lane(), z, sid)

    def _decode_on(self, lane: int, z: np.ndarray, sid: int | None) -> np.ndarray:
        frames = z.shape[2]
        session = self.sessions[lane]
        entry = self._buffers[lane].get(frames)
        if entry is None or self.has_speaker:
            feeds = {self.latent_name: np.ascontiguousarray(z)}
            if self.has_speaker:
                feeds["sid"] = np.array([sid or 0], dtype=np.int64)
            return session.run([self.output_name], feeds)[0].reshape(-1)
        binding, host_in, value_out, host_out = entry
        if self.device == "cpu":
            np.copyto(host_in, z)
            session.run_with_iobinding(binding)
            return host_out  # valid until the next decode of this bucket in this lane
        binding.bind_cpu_input(self.latent_name, np.ascontiguousarray(z))
        session.run_with_iobinding(binding)
        return value_out.numpy().reshape(-1)

    def stream(
        self,
        z: np.ndarray,
        sid: int | None = None,
        first_step: int = 0,
        keep: tuple[int, int] | None = None,
        ahead: Callable[[], float] | None = None,
        first_audio_s: float = 0.0,
    ) -> Iterator[np.ndarray]:
        """Yield float audio for z (its frames `keep`) chunk by chunk; stopping iteration
        abandons the rest. `ahead()` -> seconds of audio the stream has beyond its
        playback clock, read when the windows are planned (inside the stream's turn)."""
        windows = self.plan(z.shape[2], first_step, keep, ahead, first_audio_s)
        yield from self.decode_windows(z, windows, sid)

    def plan(
        self,
        frames: int,
        first_step: int = 0,
        keep: tuple[int, int] | None = None,
        ahead: Callable[[], float] | None = None,
        first_audio_s: float = 0.0,
    ) -> list[Window]:
        """The windows `stream` decodes, planned now (inside the stream's turn: the plan
        reads the streams waiting and the audio ahead)."""
        return list(
            plan_windows(
                frames,
                self.schedule,
                self.context,
                first_step,
                keep,
                self.affordable_core,
                contended=self.waiting() > 0,
                ahead=int(ahead() / self.frame_s) if ahead is not None else 0,
                first_core=math.ceil(first_audio_s / self.frame_s),
            )
        )

    def decode_windows(
        self, z: np.ndarray, windows: list[Window], sid: int | None = None
    ) -> Iterator[np.ndarray]:
        """Float audio of each planned window's core, one window per next()."""
        frames = z.shape[2]
        for window in windows:
            piece = z[:, :, window.start : min(window.stop, frames)]
            if window.stop > frames:  # a unit shorter than its bucket: repeat the last frame
                piece = np.pad(piece, ((0, 0), (0, 0), (0, window.stop - frames)), mode="edge")
            lo, hi = window.keep_from - window.start, window.keep_to - window.start
            parts = self.parts(lo, hi, window.stop - window.start)
            if parts:
                yield self._decode_parts(piece, parts, sid)
                continue
            audio = self.decode(piece, sid)
            self.frames_fed += window.stop - window.start
            yield audio[lo * self.hop : hi * self.hop]

    def parts(self, lo: int, hi: int, length: int) -> list[tuple[int, int, int, int]]:
        """A window's kept frames [lo, hi) as (start, stop, keep_from, keep_to) per worker
        lane, each with the window's context around its core where the window has it;
        none where the calling turn is not a lone stream's or a part would be small."""
        parts = self.split_parts
        if not parts or self.lane() != PRIMARY or (hi - lo) < parts * SPLIT_MIN_CORE:
            return []
        cuts = [lo + (hi - lo) * i // parts for i in range(parts + 1)]
        return [
            (max(0, a - self.context), min(length, b + self.context), a, b)
            for a, b in itertools.pairwise(cuts)
        ]

    def _decode_parts(
        self, piece: np.ndarray, parts: list[tuple[int, int, int, int]], sid: int | None
    ) -> np.ndarray:
        """The kept audio of a window decoded in parts, side by side on the worker lanes
        (part i on lane i + 1; the calling thread runs the first)."""
        assert self._helpers is not None
        hop = self.hop

        def kept(lane: int, part: tuple[int, int, int, int]) -> np.ndarray:
            start, stop, keep_from, keep_to = part
            audio = self._decode_on(lane, piece[:, :, start:stop], sid)
            return audio[(keep_from - start) * hop : (keep_to - start) * hop]

        others = [
            self._helpers.submit(kept, lane, part) for lane, part in enumerate(parts[1:], start=2)
        ]
        try:
            first = kept(1, parts[0])
        finally:  # no lane is left running into the next turn, even after an error
            wait(others)
        self.frames_fed += sum(stop - start for start, stop, _, _ in parts)
        return np.concatenate([first, *(other.result() for other in others)])
