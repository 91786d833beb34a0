"""The Wyoming frontend in-process over a socket pair, on a Core with fakes: the event
sequences and refusals of Home Assistant's protocol in milliseconds. The end-to-end
tests (test_wyoming.py) drive a real daemon with the wyoming package's client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.frontends.wyoming.server import WyomingConnection, WyomingFrontend
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from ...fakes import RATE, FakeHost, FakeSynth, fake_core


class Client:
    """The client end of the socket pair, speaking the wyoming package's framing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, event: Event) -> None:
        await async_write_event(event, self.writer)

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read(self) -> Event | None:
        return await asyncio.wait_for(async_read_event(self.reader), 5)

    async def until(self, last: str) -> list[Event]:
        """Events up to and including the first of type `last`."""
        events = []
        while True:
            event = await self.read()
            assert event is not None, f"connection closed before {last}: {events}"
            events.append(event)
            if event.type == last:
                return events


Check = Callable[[Client], Awaitable[None]]


@pytest.fixture
def connect():
    cores: list[Any] = []

    def run(check: Check, config: Config | None = None, **core: Any) -> None:
        made = fake_core(**core)
        cores.append(made)
        frontend = WyomingFrontend(config or Config(), FakeHost(made))

        async def go() -> None:
            ours, theirs = socket.socketpair()
            reader, writer = await asyncio.open_connection(sock=ours)
            connection = WyomingConnection(frontend, reader, writer)
            served = asyncio.ensure_future(connection.run())
            client = Client(*await asyncio.open_connection(sock=theirs))
            try:
                await check(client)
            finally:
                client.writer.close()
                await asyncio.wait_for(served, 5)

        asyncio.run(go())

    yield run
    for core in cores:
        core.shutdown()


def test_describe_lists_the_host_voices_and_version(connect) -> None:
    async def check(client: Client) -> None:
        await client.send(Describe().event())
        info = (await client.read()).data
        (program,) = info["tts"]
        assert program["version"] == FakeHost.version
        assert program["supports_synthesize_streaming"] is True
        assert [v["name"] for v in program["voices"]] == ["fake"]

    connect(check)


def test_synthesize_streams_audio_between_start_and_stop(connect) -> None:
    async def check(client: Client) -> None:
        await client.send(Synthesize(text="One two. Three four.").event())
        events = await client.until("audio-stop")
        types = [e.type for e in events]
        assert types == ["audio-start", "audio-chunk", "audio-chunk", "audio-stop"]
        assert events[0].data["rate"] == RATE
        assert sum(len(e.payload or b"") for e in events) == 2 * 50 * 2

    connect(check)


def test_streaming_session_ends_with_synthesize_stopped(connect) -> None:
    synth = FakeSynth()

    async def check(client: Client) -> None:
        await client.send(SynthesizeStart().event())
        for piece in ("Hello the", "re. And ", "goodbye."):
            await client.send(SynthesizeChunk(text=piece).event())
        await client.send(Synthesize(text="Hello there. And goodbye.").event())  # ignored
        await client.send(SynthesizeStop().event())
        types = [e.type for e in await client.until("synthesize-stopped")]
        assert types[0] == "audio-start" and types[-2:] == ["audio-stop", "synthesize-stopped"]
        assert types.count("audio-chunk") == 2

    connect(check, synth=synth)
    assert synth.spoken == ["Hello there.", "And goodbye."]


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (Event("transcribe", {}), "unknown-event"),
        (Synthesize(text="   ").event(), "empty-text"),
        (Event("synthesize", {"text": 5}), "bad-request"),
        (Event("synthesize", {"text": "Hi.", "voice": {"name": "nobody"}}), "unknown-voice"),
        (SynthesizeChunk(text="stray").event(), "no-session"),
    ],
)
def test_refused_events_get_an_error_and_the_connection_serves_on(
    connect, event: Event, code: str
) -> None:
    async def check(client: Client) -> None:
        await client.send(event)
        error = await client.read()
        assert error.type == "error" and error.data["code"] == code and error.data["text"]
        await client.send(Synthesize(text="Still here.").event())
        assert [e.type for e in await client.until("audio-stop")][-1] == "audio-stop"

    connect(check)


def test_a_malformed_header_gets_an_error_then_the_connection_closes(connect) -> None:
    async def check(client: Client) -> None:
        await client.send_raw(b"this is not json\n")
        error = await client.read()
        assert error.type == "error" and error.data["code"] == "malformed-event"
        assert await client.read() is None

    connect(check)


def test_one_request_at_a_time_per_connection(connect) -> None:
    async def check(client: Client) -> None:
        await client.send(Synthesize(text="One. Two. Three.").event())
        await client.send(Synthesize(text="Too soon.").event())
        events = await client.until("audio-stop")
        errors = [e for e in events if e.type == "error"]
        assert [e.data["code"] for e in errors] == ["busy"]

    connect(check, synth=FakeSynth(unit_delay=0.05))


def test_a_session_ended_at_the_idle_limit_frees_the_connection_at_once(connect) -> None:
    """The server ends a session that went idle (limits.stream_idle_s): an `error` coded
    `stream-idle`, `audio-stop`, `synthesize-stopped` without waiting for the client's
    stop; the next one-shot and the next session are served at once, a late stop is
    absorbed and late chunks dropped."""

    async def check(client: Client) -> None:
        await client.send(SynthesizeStart().event())
        await client.send(SynthesizeChunk(text="The first part. And then").event())
        ended = await client.until("synthesize-stopped")  # no synthesize-stop sent
        errors = [e.data for e in ended if e.type == "error"]
        assert [e["code"] for e in errors] == ["stream-idle"] and errors[0]["text"]
        assert [e.type for e in ended][-2:] == ["audio-stop", "synthesize-stopped"]
        await client.send(Synthesize(text="Right away.").event())
        assert (await client.until("audio-stop"))[0].type == "audio-start"
        await client.send(SynthesizeStart().event())
        await client.send(SynthesizeChunk(text="A new session.").event())
        await client.send(SynthesizeStop().event())
        again = [e.type for e in await client.until("synthesize-stopped")]
        assert "error" not in again and again[-2:] == ["audio-stop", "synthesize-stopped"]

    connect(check, stream_idle_s=0.3)


def test_late_events_of_a_session_the_server_ended_are_absorbed(connect) -> None:
    async def check(client: Client) -> None:
        await client.send(SynthesizeStart().event())
        await client.send(SynthesizeChunk(text="Only this.").event())
        await client.until("synthesize-stopped")
        await client.send(SynthesizeChunk(text="Too late.").event())  # dropped
        await client.send(SynthesizeStop().event())  # answered already: absorbed
        await client.send(Synthesize(text="Next.").event())
        events = await client.until("audio-stop")
        assert events[0].type == "audio-start"  # no error, no second synthesize-stopped
        await client.send(SynthesizeStop().event())  # now there is no session to stop
        assert (await client.read()).data["code"] == "no-session"

    connect(check, stream_idle_s=0.3)


def test_an_event_has_one_deadline_for_its_header_and_its_data(connect) -> None:
    """Each part within the read timeout, the whole event over it: cut off."""
    data = b'{"text": "Too slow."}'

    async def check(client: Client) -> None:
        await client.send_raw(b"{")
        await asyncio.sleep(0.4)
        await client.send_raw(f'"type": "synthesize", "data_length": {len(data)}}}\n'.encode())
        await asyncio.sleep(0.2)  # the event is over its 0.5 s now; its data part is not
        try:
            answer = await asyncio.wait_for(async_read_event(client.reader), 0.2)
        except asyncio.TimeoutError:  # not cut: finish the event as a slow client would
            await client.send_raw(data)
            answer = await client.read()
        assert answer.type == "error" and answer.data["code"] == "timeout"

    connect(check, config=Config.model_validate({"limits": {"client_read_timeout_s": 0.5}}))


def test_a_session_refused_at_its_start_ends_at_once_and_frees_the_connection(connect) -> None:
    async def check(client: Client) -> None:
        await client.send(SynthesizeStart(voice=SynthesizeVoice(name="nobody")).event())
        assert [e.type for e in await client.until("synthesize-stopped")] == [
            "error",
            "synthesize-stopped",
        ]
        await client.send(Synthesize(text="Served at once.").event())  # no stop in between
        assert (await client.until("audio-stop"))[-1].type == "audio-stop"

    connect(check)


def test_home_assistants_late_repeat_and_stop_after_an_idle_end_are_absorbed(connect) -> None:
    """HA sends chunks, then the whole text again, then synthesize-stop: after the server
    ended the session at the idle limit, those belong to it and are not spoken again."""
    synth = FakeSynth()

    async def check(client: Client) -> None:
        await client.send(SynthesizeStart().event())
        await client.send(SynthesizeChunk(text="The lights are off. ").event())
        await client.send(SynthesizeChunk(text="Good night").event())
        await client.until("synthesize-stopped")  # the idle end
        await client.send(Synthesize(text="The lights are off.  Good night").event())
        await client.send(SynthesizeStop().event())
        await client.send(Describe().event())  # the next answer must be the info
        assert (await client.read()).type == "info"

    connect(check, synth=synth, stream_idle_s=0.3)
    assert synth.spoken == ["The lights are off.", "Good night"]
