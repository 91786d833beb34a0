"""The earcon through the real player into an ALSA file PCM: a starved synthesis makes it
sound (ahead of the speech, while nothing is made yet), a fast one does not, a failure
makes the falling one, client-bound audio never gets one. The synthesizer is a fake
that waits; the core, the speaker worker, the player and ALSA are real."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from magpie_tts.daemon.config import AudioConfig
from magpie_tts.daemon.core import earcon
from magpie_tts.daemon.core.core import Core, CoreLimits
from magpie_tts.daemon.core.utterance import Ask
from magpie_tts.daemon.player import Player
from magpie_tts.engine import AudioChunk, EngineError, TextPolicy

from ..fakes import FakeRegistry, FakeSynth, FakeVoice, RecordingSink

RATE = 16000
AFTER_S = 0.3
SPEECH = np.round(8000 * np.sin(2 * np.pi * 300 * np.arange(RATE // 5) / RATE)).astype(np.int16)


class Voice(FakeVoice):
    sample_rate = RATE


class SpyPlayer(Player):
    """The real player; it also remembers what it was given, in order."""

    def __init__(self, config: AudioConfig) -> None:
        super().__init__(config)
        self.given: list = []

    def submit(self, playback, pcm, timeout=None, unit=None) -> bool:
        self.given.append(playback)
        return super().submit(playback, pcm, timeout, unit)


class Synth(FakeSynth):
    """One chunk of SPEECH per unit, after `ready()` says so (a starved CPU)."""

    def __init__(self, ready=lambda: True, fails: bool = False) -> None:
        super().__init__()
        self.voice = Voice()
        self.ready = ready
        self.fails = fails

    def stream_clauses(self, units, options=None, stop=None, cache_use="auto", **kwargs):
        for index, unit in enumerate(units):
            deadline = time.monotonic() + 10
            while not self.ready() and time.monotonic() < deadline:
                time.sleep(0.01)
            if self.fails:
                raise EngineError("test: synthesis failed")
            self.spoken.append(unit)
            yield AudioChunk(SPEECH, RATE, index, compute_s=0.01)


class Rig:
    def __init__(self, folder: Path, synth: Synth, after_s: float | None = AFTER_S) -> None:
        self.tap = folder / "tap.raw"
        self.player = SpyPlayer(AudioConfig(device=f"file:FILE={self.tap},FORMAT=raw"))
        self.core = Core(
            FakeRegistry(synth),  # type: ignore[arg-type]
            self.player,
            TextPolicy(first_clause_words=0),
            CoreLimits(rate_per_minute=1000, earcon_after_s=after_s),
        )
        self.player.start()
        self.core.start()
        self.sink = RecordingSink()

    def say(self, request_id: str, out=None) -> None:
        ask = Ask(id=request_id, text="Hello.", source="wyoming" if out else "say")
        self.core.submit(ask, self.sink, out)
        terminal = "error" if "fail" in request_id else "finished"
        self.sink.wait(request_id, terminal, timeout=15)

    def recorded(self) -> np.ndarray:
        """What reached ALSA (the player closed: the file plugin has written it all)."""
        self.core.shutdown()
        self.player.close()
        data = self.tap.read_bytes() if self.tap.exists() else b""
        return np.frombuffer(data, dtype="<i2")


def earcon_sounded(player: SpyPlayer) -> bool:
    """The player was given something before the speech and has written it to ALSA."""
    return bool(player.given) and player.given[0].first_frame_at is not None


def test_the_tone_is_two_soft_blips_that_fade_in_and_out() -> None:
    coming, failed = earcon.tone(RATE, "coming"), earcon.tone(RATE, "failed")
    assert len(coming) == len(failed) == round(0.22 * RATE)
    assert np.abs(coming).max() <= 0.1 * 32767 + 1  # −20 dBFS
    assert abs(int(coming[0])) <= 1 and abs(int(coming[-1])) <= 1  # no click
    half = len(coming) // 2
    gap = coming[round(0.08 * RATE) + 10 : round(0.14 * RATE) - 10]
    assert not gap.any()

    def pitch(pcm: np.ndarray) -> float:
        spectrum = np.abs(np.fft.rfft(pcm.astype(float)))
        return float(np.fft.rfftfreq(len(pcm), 1 / RATE)[spectrum.argmax()])

    assert pitch(coming[half:]) > pitch(coming[:half])  # rising: coming
    assert pitch(failed[half:]) < pitch(failed[:half])  # falling: failed
    assert len(earcon.tone(22050)) == round(0.22 * 22050)  # at the voice's rate


def test_a_starved_synthesis_gets_the_earcon_ahead_of_its_speech(tmp_path) -> None:
    player_box: list[SpyPlayer] = []
    rig = Rig(tmp_path, Synth(ready=lambda: earcon_sounded(player_box[0])))
    player_box.append(rig.player)
    rig.say("slow")  # the synthesis makes nothing until the earcon has sounded
    events = rig.sink.names("slow")
    assert events == ["queued", "started", "finished"]
    tone = earcon.tone(RATE, "coming")
    played = rig.recorded()
    assert np.array_equal(played, np.concatenate([tone, SPEECH]))


def test_a_fast_synthesis_gets_no_earcon(tmp_path) -> None:
    rig = Rig(tmp_path, Synth())
    rig.say("fast")
    time.sleep(AFTER_S + 0.3)  # past the budget: the watch was called off, not late
    assert np.array_equal(rig.recorded(), SPEECH)


def test_a_failed_utterance_gets_the_falling_earcon(tmp_path) -> None:
    rig = Rig(tmp_path, Synth(fails=True), after_s=5.0)
    rig.say("fail")
    assert "test: synthesis failed" in rig.sink.fields("fail", "error")["error"]
    deadline = time.monotonic() + 5
    while not (rig.player.given and rig.player.given[-1].finished.is_set()):
        assert time.monotonic() < deadline, "the failed earcon never played"
        time.sleep(0.01)
    assert np.array_equal(rig.recorded(), earcon.tone(RATE, "failed"))


class Out:
    def write(self, pcm, rate) -> bool:
        return True


@pytest.mark.parametrize("after_s", [AFTER_S, None], ids=["client-bound", "earcon-off"])
def test_no_earcon_for_client_audio_or_when_off(tmp_path, after_s) -> None:
    release = threading.Event()
    threading.Timer(AFTER_S * 2, release.set).start()  # slower than the budget
    rig = Rig(tmp_path, Synth(ready=release.is_set), after_s=after_s)
    client = Out() if after_s is not None else None
    rig.say("slow", out=client)
    time.sleep(0.1)
    played = rig.recorded()
    assert np.array_equal(played, np.zeros(0, np.int16) if client else SPEECH)
