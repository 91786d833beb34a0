"""How many client streams the daemon admits at once, and when a request is shed.

Both come from measured speed, not fixed numbers (the warm-up's, engine/stream/speed.py):

- **Capacity** (`limits.max_streams = "auto"`). A stream played in real time needs one
  second of audio per second; a lane makes `1 / rtf` of them. The lanes decode side by
  side, but never more than the cores can run (each lane's threads spin on a core):

      throughput = min(Σ 1/rtf_lane,  cores / mean(rtf_lane × threads_lane))
      capacity   = floor(SAFETY × throughput / slowdown)

  SAFETY leaves room for what the warm-up's largest windows do not pay: first turns
  (a first unit's frontend with its seam words, a 16-frame window with its context),
  encoding, the event loop and a machine shared with other work. `slowdown` is how
  much slower first turns run now than at warm-up (the engine's moving average of the
  first turns measured live, against the warm-up's estimate), counted past a 1.5
  dead band (first turns of one stream spread 0.5–1.2× the estimate here, and a
  burst's Python work between turns adds to them): a CPU starved by other work admits
  fewer. An integer `limits.max_streams` caps it. Past it a request is refused at once
  (`busy`).
- **Shedding** (`limits.first_audio_budget_ms`). A new utterance's first audio waits
  for the first turns ahead of it (streams with no audio yet; the speaker's come first)
  on the lanes, slowed by the compute the started streams take to stay real-time:

      first_audio ≈ ⌈(starting ahead + 1) / lanes⌉ × first_turn / (1 − load)
      load        = started streams / (throughput / slowdown)

  `first_turn` is the live measure (the engine's moving average of first turns) where
  there is one, else the warm-up's; `slowdown` as above (without the dead band). A
  request that would miss the budget
  is refused at once, unless it is never shed: an alert, or a `normal` utterance for
  the speaker (which gets the earcon instead, speaker.py); clients and `low` speaker
  utterances are shed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from magpie_tts.engine import Speed

# Measured (2 cores, INT8, 2 lanes, medium sentence, all clients at once, 2 rounds):
# throughput 46.1 real-time streams; N = 18 served with no underrun (0/36), N = 22
# underran 25/44; one lane on both threads: 30.8, N = 10 none, N = 14 14/28. Real time
# holds to ~0.4 of the estimate (0.6 admitted 27: every stream underran).
SAFETY = 0.4
DEAD_BAND = 1.5  # first turns this much slower than at warm-up still count as its speed
# Before the voice is measured (and when it cannot be): the fixed limit of old.
UNMEASURED = 8
MAX_STREAMS = 256
NEVER_SHED_SPEAKER = frozenset({"alert", "normal"})


def throughput(speed: Speed) -> float:
    """Real-time streams the lanes can make at once (see the module's doc)."""
    lanes = [lane for lane in speed.lanes if lane.rtf > 0]
    if not lanes:
        return 0.0
    side_by_side = sum(1.0 / lane.rtf for lane in lanes)
    cpu_per_stream = sum(lane.rtf * lane.threads for lane in lanes) / len(lanes)
    return min(side_by_side, speed.cores / cpu_per_stream)


def stream_capacity(speed: Speed, cap: int | None = None, slowdown: float = 1.0) -> int:
    capacity = max(1, min(MAX_STREAMS, math.floor(SAFETY * throughput(speed) / slowdown)))
    return capacity if cap is None else min(cap, capacity)


def slowdown(speed: Speed, first_turn_s: float | None) -> float:
    """How much slower first turns run now than at warm-up (1: not slower)."""
    if not first_turn_s or speed.first_turn_s <= 0:
        return 1.0
    return max(1.0, first_turn_s / speed.first_turn_s)


@dataclass(frozen=True)
class Load:
    """What runs now, as admission sees it."""

    started: int  # streams making audio that have made some (the speaker's included)
    starting: int  # client streams admitted that have made none yet


def predicted_first_s(
    speed: Speed, load: Load, for_speaker: bool, first_turn_s: float | None = None
) -> float:
    """Seconds until a new utterance's first audio under `load` (inf: never in time)."""
    turn = first_turn_s or speed.first_turn_s
    capacity = throughput(speed) / slowdown(speed, first_turn_s)
    if capacity <= 0:
        return math.inf
    busy = load.started / capacity
    if busy >= 1.0:
        return math.inf
    ahead = 0 if for_speaker else load.starting  # the speaker's first turn comes first
    lanes = max(1, len(speed.lanes))
    return math.ceil((ahead + 1) / lanes) * turn / (1.0 - busy)


class Capacity:
    """The admitted stream limit and the shedding rule; `measure` sets them from the
    default voice's speed once it is warm (until then: the cap, or UNMEASURED)."""

    def __init__(self, cap: int | None, budget_ms: float = 0.0) -> None:
        self.cap = cap  # None: "auto"
        self.budget_s = budget_ms / 1000.0  # 0: no shedding
        self.speed: Speed | None = None
        self.live_first_turn: Callable[[], float | None] = lambda: None
        self.shed = 0  # requests refused by the budget
        self._lock = threading.Lock()

    def measure(self, speed: Speed, live_first_turn: Callable[[], float | None]) -> int:
        if throughput(speed) > 0:
            self.speed = speed
            self.live_first_turn = live_first_turn
        return self.limit

    @property
    def limit(self) -> int:
        """Client streams admitted at once now."""
        if self.speed is None:
            return self.cap if self.cap is not None else UNMEASURED
        slower = slowdown(self.speed, self.live_first_turn())
        return stream_capacity(self.speed, self.cap, slower if slower > DEAD_BAND else 1.0)

    def describe(self) -> dict[str, float | int | str]:
        """Status and /health: the limit and where it comes from."""
        shown: dict[str, float | int | str] = {
            "limit": self.limit,
            "source": "measured" if self.speed else "unmeasured",
        }
        if self.cap is not None:
            shown["cap"] = self.cap
        if self.speed is not None:
            shown["real_time_streams"] = round(throughput(self.speed), 1)
            lanes = self.speed.lanes
            shown["lanes"] = len(lanes)
            shown["lane_rtf"] = round(sum(lane.rtf for lane in lanes) / len(lanes), 4)
            shown["slowdown"] = round(slowdown(self.speed, self.live_first_turn()), 2)
        if self.budget_s:
            shown["first_audio_budget_ms"] = round(self.budget_s * 1000)
        return shown

    def over_budget(self, priority: str, for_speaker: bool, load: Load) -> float | None:
        """The predicted first audio (s) when this request is to be shed; else None."""
        if not self.budget_s or self.speed is None or priority == "alert":
            return None
        if for_speaker and priority in NEVER_SHED_SPEAKER:
            return None
        predicted = predicted_first_s(self.speed, load, for_speaker, self.live_first_turn())
        if predicted <= self.budget_s:
            return None
        with self._lock:
            self.shed += 1
        return predicted
