"""A synthesizer's measured speed: what each lane that serves concurrent streams makes per
second of compute, from the warm-up (synth.py, decoder.py). The daemon sizes admission
by it (daemon/core/capacity.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .synth import StreamingSynthesizer


@dataclass(frozen=True)
class LaneSpeed:
    rtf: float  # compute seconds per second of audio (a unit's frontend + its windows)
    threads: int  # the onnxruntime threads its sessions run on


@dataclass(frozen=True)
class Speed:
    lanes: tuple[LaneSpeed, ...]  # the lanes concurrent streams decode on, side by side
    first_turn_s: float  # a stream's first turn alone: a first unit's frontend + window
    cores: int


FIRST_UNIT_CHARS = 40  # a typical first clause with its seam words (segment.py: ~6 words)


def measured_speed(synth: StreamingSynthesizer) -> Speed:
    """The warm-up's speed of the lanes that decode concurrent streams: the worker lanes
    when there are any (the primary lane serves a stream alone), else the primary."""
    workers = synth.sessions.workers
    threads = synth.runtime.intra_op_threads or os.cpu_count() or 1
    lanes = list(range(1, workers + 1)) if workers else [0]
    share = max(1, threads // workers) if workers else threads
    speeds = []
    for lane in lanes:
        decode = synth.decoder.lane_rtf(lane) or 0.0
        frontend = synth.frontend_s_per_frame[lane] / synth.decoder.frame_s
        speeds.append(LaneSpeed(rtf=decode + frontend, threads=share))
    # A first turn runs on one lane: a first unit's frontend and the first window.
    lane = lanes[0]
    per_frame = synth.decoder.lane_rtf(lane) or 0.0
    first_window = (synth.config.schedule[0] + 2 * synth.context) * synth.decoder.frame_s
    first_turn = synth.frontend_s_per_char[lane] * FIRST_UNIT_CHARS + per_frame * first_window
    return Speed(tuple(speeds), first_turn, usable_cores())


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, and a container's CPU quota
    (cgroup v2 cpu.max, e.g. a Kubernetes limit of 1.5 CPUs: 1), whichever is less."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cores
