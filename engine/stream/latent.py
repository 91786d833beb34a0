"""The flow at run time: z made from z_p window by window as the decoder reads it, and
the noise each unit is spoken with. The offline half (finding and checking the
encoder/flow split) is engine/graph/flow_split.py."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import numpy as np

FlowRun = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (z_p, mask) windows → z


def unit_noise(seed: int | None, ids: list[int]) -> np.random.Generator:
    """The noise a unit is spoken with: from its phoneme ids and `seed` (the same unit,
    the same sound; two frontends given one seed hear the same noise), or fresh."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([seed, zlib.crc32(np.asarray(ids, dtype=np.int64).tobytes())])


class FlowLatent:
    """z of one unit, made by the flow when the decoder first reads it.

    Reads are `z[:, :, start:stop]` slices (ChunkedDecoder.stream). Only frames
    [lo, hi) are ever read. With `small_first` the first read runs the flow over that
    window alone (plus context), and the next over the rest: the first sound waits for
    the least flow; otherwise the first read runs it over all of [lo, hi) at once."""

    def __init__(
        self,
        run: FlowRun,
        prior: np.ndarray,
        mask: np.ndarray,
        context: int,
        reads: tuple[int, int],
        small_first: bool,
    ) -> None:
        self._run, self._prior, self._mask, self._context = run, prior, mask, context
        self.shape = prior.shape
        self._lo, self._hi = max(reads[0], 0), min(reads[1], prior.shape[2])
        self._small_first = small_first
        self._z = np.zeros(prior.shape, dtype=np.float32)
        self._made: tuple[int, int] | None = None  # exact frames [from, to)
        self.spent_frames = 0  # frames the flow ran over, context included
        self.spent_s = 0.0

    def __getitem__(self, key: tuple[slice, slice, slice]) -> np.ndarray:
        frames = key[2]
        start, stop = max(frames.start or 0, 0), min(frames.stop, self.shape[2])
        if self._made is None:
            if self._small_first:
                self._make(start, stop)
            else:
                self._make(min(start, self._lo), max(stop, self._hi))
        else:
            made_from, made_to = self._made
            if start < made_from:
                self._make(min(start, self._lo), made_from)
            if stop > made_to:
                self._make(made_to, max(stop, self._hi))
        return self._z[key]

    def whole_s(self) -> float:
        """Seconds one flow run over every frame read would take, from the runs so far
        (the flow's cost is linear in frames): what a unit's first turn costs when it
        does not start small."""
        if not self.spent_frames:
            return 0.0
        frames = min(self._hi + self._context, self.shape[2]) - max(self._lo - self._context, 0)
        return self.spent_s * frames / self.spent_frames

    def _make(self, start: int, stop: int) -> None:
        """Run the flow over [start, stop) with its context; keep those frames."""
        frames = self.shape[2]
        lo, hi = max(start - self._context, 0), min(stop + self._context, frames)
        if hi <= lo:
            return
        started = time.perf_counter()
        z = self._run(self._prior[:, :, lo:hi], self._mask[:, :, lo:hi])
        self.spent_s += time.perf_counter() - started
        self._z[:, :, start:stop] = z[:, :, start - lo : stop - lo]
        self.spent_frames += hi - lo
        if self._made is None:
            self._made = (start, stop)
        else:  # pieces adjoin what was made: the made span stays contiguous
            self._made = (min(self._made[0], start), max(self._made[1], stop))
