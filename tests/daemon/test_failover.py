"""Failover in process (core/failover.py): a synthesizer whose run really raises (a test-only
wrapper that raises onnxruntime's own exception type part-way through a unit), the retry
on the fallback from that unit, the policy that sets a voice aside and probes it later.
The end-to-end paths with real broken models are in test_failover_daemon.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from magpie_tts.daemon.core.failover import Failover, FailoverPolicy, resample
from magpie_tts.engine import AudioChunk, StopToken, SynthesisOptions, TextError
from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

from ..fakes import FakeSynth, FakeVoice


class Voice(FakeVoice):
    def __init__(self, name: str, rate: int = 1000) -> None:
        self.name = name
        self.sample_rate = rate


class Units:
    """Each unit's audio: `chunks` chunks of 10 samples valued by unit index (so a repeat
    or a gap shows); raises `error` on the given (unit, chunk) like a failing session."""

    def __init__(self, name: str, rate: int = 1000, fail_at: tuple[int, int] | None = None):
        self.voice = Voice(name, rate)
        self.fail_at = fail_at
        self.error: Exception = RuntimeException("CUDA failure 2: out of memory")
        self.calls = 0
        self.choice = type("Choice", (), {"used": "cpu"})()

    def stream_clauses(self, units, options=None, stop=None, first_index=0, **_: Any):
        self.calls += 1
        for index, _unit in enumerate(units, start=first_index):
            for part in range(3):
                if self.fail_at == (index, part):
                    raise self.error
                size = 10 * self.voice.sample_rate // 1000
                yield AudioChunk(np.full(size, index + 1, np.int16), self.voice.sample_rate, index)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(failover: Failover, synth: Any, units: Any) -> list[AudioChunk]:
    return list(failover.stream(synth, units, SynthesisOptions(), StopToken()))


def test_a_failure_mid_unit_goes_on_with_the_fallback_where_the_audio_stopped() -> None:
    primary, fallback = Units("primary", fail_at=(1, 2)), Units("fallback")
    events: list[tuple[str, str]] = []
    failover = Failover(fallback, FailoverPolicy(after=3))
    failover.on_event = lambda voice, what: events.append((voice, what))
    chunks = run(failover, primary, ["a", "b", "c"])
    audio = np.concatenate([c.pcm for c in chunks])
    # unit 0 whole, unit 1's first two chunks from the primary, its third from the fallback
    # (its first two skipped: heard already), then unit 2: 30 samples each, none twice
    assert list(audio) == [1] * 30 + [2] * 30 + [3] * 30
    assert [c.clause_index for c in chunks] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert events == [("primary", "retried")]
    assert failover.problems() == []  # one failure does not set the voice aside


def test_the_fallback_audio_comes_at_the_primary_rate() -> None:
    primary, fallback = Units("primary", 2000, fail_at=(0, 0)), Units("fallback", 1000)
    chunks = run(Failover(fallback, FailoverPolicy()), primary, ["a"])
    assert {c.sample_rate for c in chunks} == {2000}
    assert sum(len(c.pcm) for c in chunks) == 60  # 30 ms at 2 kHz
    assert len(resample(np.zeros(100, np.int16), 1000, 1600)) == 160


def test_a_request_error_is_not_retried() -> None:
    primary, fallback = Units("primary", fail_at=(0, 0)), Units("fallback")
    primary.error = TextError("nothing speakable")
    with pytest.raises(TextError):
        run(Failover(fallback, FailoverPolicy()), primary, ["a"])
    assert fallback.calls == 0


def test_repeated_failures_set_the_voice_aside_until_its_probe() -> None:
    clock = Clock()
    primary, fallback = Units("primary", fail_at=(0, 0)), Units("fallback")
    failover = Failover(fallback, FailoverPolicy(after=2, window_s=60, probe_s=300), clock)
    events: list[str] = []
    changes: list[int] = []
    failover.on_event = lambda voice, what: events.append(what)
    failover.on_change = lambda: changes.append(1)
    run(failover, primary, ["a"])
    clock.now = 70.0  # the first failure is out of the window: not yet aside
    run(failover, primary, ["a"])
    assert failover.problems() == []
    clock.now = 80.0
    run(failover, primary, ["a"])
    assert events == ["retried", "retried", "retried", "set_aside"]
    (problem,) = failover.problems()
    assert "primary set aside" in problem and "RuntimeException" in problem
    calls = primary.calls
    assert len(run(failover, primary, ["a", "b"])) == 6  # straight to the fallback
    assert primary.calls == calls
    clock.now = 80.0 + 301  # the probe is due: the next utterance asks the primary again
    primary.fail_at = None
    assert [c.pcm[0] for c in run(failover, primary, ["a"])] == [1, 1, 1]
    assert primary.calls == calls + 1
    assert events[-1] == "restored" and failover.problems() == [] and len(changes) == 2


def test_a_failed_probe_sets_the_voice_aside_again() -> None:
    clock = Clock()
    primary, fallback = Units("primary", fail_at=(0, 0)), Units("fallback")
    failover = Failover(fallback, FailoverPolicy(after=1, probe_s=10), clock)
    run(failover, primary, ["a"])
    clock.now = 11.0
    run(failover, primary, ["a"])  # the probe: fails, retried on the fallback
    assert primary.calls == 2 and failover.problems()
    clock.now = 12.0
    run(failover, primary, ["a"])
    assert primary.calls == 2  # aside for another probe_s


def test_when_the_fallback_fails_too_the_error_is_raised_and_counted() -> None:
    primary, fallback = Units("primary", fail_at=(0, 1)), Units("fallback", fail_at=(0, 0))
    events: list[str] = []
    failover = Failover(fallback, FailoverPolicy())
    failover.on_event = lambda voice, what: events.append(what)
    with pytest.raises(RuntimeException):
        run(failover, primary, ["a"])
    assert events == ["retried", "failed"]


def test_without_a_fallback_synthesis_is_the_voice_alone() -> None:
    synth = FakeSynth()
    chunks = list(Failover(None, FailoverPolicy()).stream(synth, ["a"], None, StopToken()))
    assert synth.spoken == ["a"] and len(chunks) == 1


def test_a_stream_of_units_goes_on_from_its_source_after_the_failure() -> None:
    """Units that arrive as a stream (Wyoming, HTTP text bodies): the unit that failed is
    made again, then the source goes on feeding the fallback."""
    pulled: list[str] = []

    def arriving():
        for unit in ["a", "b", "c", "d"]:
            pulled.append(unit)
            yield unit

    primary, fallback = Units("primary", fail_at=(1, 0)), Units("fallback")
    chunks = run(Failover(fallback, FailoverPolicy()), primary, arriving())
    assert [c.clause_index for c in chunks] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [int(c.pcm[0]) for c in chunks[::3]] == [1, 2, 3, 4]
    assert pulled == ["a", "b", "c", "d"]  # each pulled once from the source
