"""Admission by measured capacity and shedding by the first-audio budget: the arithmetic
(capacity.py) on made-up speeds, and the core refusing with fakes (milliseconds)."""

from __future__ import annotations

import math

import pytest
from magpie_tts.daemon.config import Config, ConfigError, load_config, resolved_workers
from magpie_tts.daemon.core.capacity import (
    SAFETY,
    Capacity,
    Load,
    predicted_first_s,
    stream_capacity,
    throughput,
)
from magpie_tts.daemon.core.utterance import Ask, Refused
from magpie_tts.engine import LaneSpeed, Speed

from ..fakes import FakeSynth, RecordingSink, fake_core


def speed(*rtfs: float, threads: int = 1, cores: int = 2, first_turn_s: float = 0.05) -> Speed:
    return Speed(tuple(LaneSpeed(r, threads) for r in rtfs), first_turn_s, cores)


class Out:
    """A client's connection that takes everything."""

    def write(self, pcm, rate) -> bool:
        return True


def test_capacity_is_the_lanes_real_time_streams_with_headroom() -> None:
    two_lanes = speed(0.1, 0.1)  # each lane makes 10 s of audio a second
    assert throughput(two_lanes) == pytest.approx(20)
    assert stream_capacity(two_lanes) == math.floor(SAFETY * 20) >= 1
    assert stream_capacity(two_lanes, cap=5) == 5  # a configured integer caps it
    assert stream_capacity(speed(2.0)) == 1  # slower than real time: still one


def test_lanes_beyond_the_cores_add_no_capacity() -> None:
    # Four one-thread lanes on two cores run two at a time: 20 streams, not 40.
    assert throughput(speed(0.1, 0.1, 0.1, 0.1, cores=2)) == pytest.approx(20)
    # One lane on two threads: its own speed bounds it.
    assert throughput(speed(0.1, threads=2, cores=2)) == pytest.approx(10)


def test_predicted_first_audio_grows_with_the_streams_ahead_and_the_load() -> None:
    fast = speed(0.1, 0.1, first_turn_s=0.05)  # 20 real-time streams, 2 lanes
    idle = predicted_first_s(fast, Load(started=0, starting=0), for_speaker=False)
    assert idle == pytest.approx(0.05)
    # five starting ahead of it on two lanes: three rounds of first turns
    assert predicted_first_s(fast, Load(0, 5), False) == pytest.approx(0.15)
    # ten started streams take half the compute: turns come at half speed
    assert predicted_first_s(fast, Load(10, 0), False) == pytest.approx(0.1)
    # the speaker's first turn comes before the clients' starting ones
    assert predicted_first_s(fast, Load(10, 5), True) == pytest.approx(0.1)
    assert predicted_first_s(fast, Load(20, 0), False) == math.inf


def test_a_starved_cpu_measured_live_lowers_what_fits() -> None:
    fast = speed(0.1, 0.1, first_turn_s=0.05)
    # first turns now take 4× the warm-up's: a quarter of the throughput is left
    starved = predicted_first_s(fast, Load(4, 0), False, first_turn_s=0.2)
    assert starved == pytest.approx(0.2 / (1 - 4 / 5))
    assert predicted_first_s(fast, Load(5, 0), False, first_turn_s=0.2) == math.inf


def test_a_starved_cpu_admits_fewer_streams() -> None:
    live: list[float | None] = [None]
    capacity = Capacity(None)
    capacity.measure(speed(0.1, 0.1, first_turn_s=0.05), lambda: live[0])
    full = math.floor(SAFETY * 20)
    assert capacity.limit == full  # no first turn measured yet: the warm-up's speed
    live[0] = 0.06  # within the spread of an idle machine
    assert capacity.limit == full
    live[0] = 0.1  # first turns take twice as long: half the streams
    assert capacity.limit == math.floor(SAFETY * 20 / 2) < full
    assert Capacity(4).limit == 4 and stream_capacity(speed(0.1, 0.1), 4, 1.5) == 4


def test_who_is_shed_alerts_and_normal_speaker_utterances_never() -> None:
    capacity = Capacity(None, budget_ms=100)
    capacity.measure(speed(0.1, 0.1, first_turn_s=0.05), lambda: None)
    heavy = Load(started=15, starting=4)  # 0.05 × 3 / 0.25 = 0.6 s
    assert capacity.over_budget("normal", for_speaker=False, load=heavy) == pytest.approx(0.6)
    assert capacity.over_budget("low", for_speaker=True, load=Load(19, 0)) is not None
    assert capacity.over_budget("alert", for_speaker=False, load=heavy) is None
    assert capacity.over_budget("normal", for_speaker=True, load=Load(20, 0)) is None
    assert capacity.over_budget("normal", False, Load(0, 0)) is None  # 50 ms: in budget
    assert capacity.shed == 2
    assert Capacity(None, budget_ms=0).over_budget("low", True, Load(99, 99)) is None


def test_unmeasured_capacity_is_the_cap_or_eight() -> None:
    assert Capacity(None).limit == 8
    assert Capacity(3).limit == 3
    capacity = Capacity(None)
    assert capacity.measure(speed(0.05, 0.05), lambda: None) == math.floor(SAFETY * 40)
    assert capacity.describe()["source"] == "measured"


def test_the_core_refuses_past_the_measured_capacity_at_once() -> None:
    core = fake_core(FakeSynth(unit_delay=0.5), max_streams=None)
    try:
        core.capacity.measure(speed(0.5, threads=2), lambda: None)  # floor(SAFETY × 2) < 1: one
        assert core.slots.max_streams == 1
        sink = RecordingSink()
        core.submit(Ask(id="one", text="Hello there.", source="http"), sink, Out())
        with pytest.raises(Refused) as refused:
            core.submit(Ask(id="two", text="Hello again.", source="http"), sink, Out())
        assert refused.value.code == "busy" and refused.value.retry_after == 1.0
        assert "limit 1" in str(refused.value)
        sink.wait("one", "finished")
    finally:
        core.shutdown()


def test_the_core_sheds_clients_and_low_speaker_utterances_over_budget() -> None:
    core = fake_core(FakeSynth(), max_streams=None, first_audio_budget_ms=100)
    try:
        # first turns take 0.3 s: past the budget even when idle
        core.capacity.measure(speed(0.1, 0.1, first_turn_s=0.3), lambda: None)
        sink = RecordingSink()
        for ask, out in (
            (Ask(id="client", text="Hello.", source="http"), Out()),
            (Ask(id="low", text="Hello.", priority="low"), None),
        ):
            with pytest.raises(Refused, match="past the 100 ms budget") as refused:
                core.submit(ask, sink, out)
            assert refused.value.code == "busy"
        core.submit(Ask(id="alert", text="Smoke!", priority="alert"), sink)
        core.submit(Ask(id="normal", text="Dinner is ready."), sink)
        sink.wait("alert", "finished")
        sink.wait("normal", "finished")
        assert core.capacity.shed == 2
    finally:
        core.shutdown()


def test_workers_auto_lanes_for_network_clients_on_two_cores() -> None:
    default = Config()
    assert default.engine.workers == "auto" and default.limits.max_streams == "auto"
    assert resolved_workers(default, cores=2) == 2  # HTTP and Wyoming are on by default
    assert resolved_workers(default, cores=1) == 0
    assert resolved_workers(default, cores=16) == 4
    speaker_only = Config.model_validate(
        {"http": {"enabled": False}, "wyoming": {"enabled": False}}
    )
    assert resolved_workers(speaker_only, cores=8) == 0
    pinned = Config.model_validate({"engine": {"workers": 1, "threads": 1}})
    assert resolved_workers(pinned, cores=8) == 1
    one_thread = Config.model_validate({"engine": {"threads": 1}})
    assert resolved_workers(one_thread, cores=8) == 0


def test_numbers_or_auto_from_the_environment(tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    env = {"MAGPIE_TTS_LIMITS__MAX_STREAMS": "12", "MAGPIE_TTS_ENGINE__WORKERS": "0"}
    config = load_config(path, env)
    assert config.limits.stream_cap == 12 and config.engine.workers == 0
    assert load_config(path, {}).limits.stream_cap is None
    for key, value in (("LIMITS__MAX_STREAMS", "0"), ("ENGINE__WORKERS", "many")):
        with pytest.raises(ConfigError):
            load_config(path, {f"MAGPIE_TTS_{key}": value})


def test_wyoming_hears_busy_when_shed() -> None:
    """Home Assistant's protocol (in-process, the wyoming package's framing): a request
    over the budget gets an `error` coded `busy`, and the connection goes on serving."""
    import asyncio
    import socket

    from magpie_tts.daemon.frontends.wyoming.server import WyomingConnection, WyomingFrontend
    from wyoming.event import async_read_event, async_write_event
    from wyoming.tts import Synthesize

    from ..fakes import FakeHost

    core = fake_core(FakeSynth(), max_streams=None, first_audio_budget_ms=100)
    core.capacity.measure(speed(0.1, 0.1, first_turn_s=0.3), lambda: None)
    frontend = WyomingFrontend(Config(), FakeHost(core))

    async def go() -> list[str]:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        served = asyncio.ensure_future(WyomingConnection(frontend, reader, writer).run())
        client_reader, client_writer = await asyncio.open_connection(sock=theirs)
        codes = []
        for _ in range(2):  # refused, and refused again: nothing stalls or breaks
            await async_write_event(Synthesize(text="Hello there.").event(), client_writer)
            event = await asyncio.wait_for(async_read_event(client_reader), 5)
            assert event is not None and event.type == "error", event
            codes.append(event.data["code"])
        client_writer.close()
        await asyncio.wait_for(served, 5)
        return codes

    try:
        assert asyncio.run(go()) == ["busy", "busy"]
    finally:
        core.shutdown()
