"""One daemon with all three frontends on, driven by their real clients (mosquitto_pub,
httpx, the `wyoming` package): a Wyoming session that went idle frees its connection at
once."""

from __future__ import annotations

import asyncio

import pytest
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from ...harness import free_port, make_daemon


@pytest.fixture(scope="module")
def every_frontend(tmp_path_factory, broker, prepared_state):
    http_port, wyoming_port = free_port(), free_port()
    proc = make_daemon(
        tmp_path_factory.mktemp("all"),
        broker.port,
        prepared_state,
        http__enabled="true",
        http__port=str(http_port),
        http__rate_per_minute="1000",
        wyoming__enabled="true",
        wyoming__port=str(wyoming_port),
        limits__stream_idle_s="1.5",
        limits__rate_per_minute="1000",
    ).start()
    proc.url = f"http://127.0.0.1:{http_port}"
    proc.wyoming_port = wyoming_port
    yield proc
    proc.stop()


async def _until(client: AsyncTcpClient, last: str, timeout: float = 30) -> list[Event]:
    events: list[Event] = []
    while True:
        event = await asyncio.wait_for(client.read_event(), timeout)
        assert event is not None, f"connection closed before {last}: {events}"
        events.append(event)
        if event.type == last:
            return events


def _codes(events: list[Event]) -> list[str]:
    return [e.data["code"] for e in events if e.type == "error"]


def test_a_wyoming_session_ended_at_the_idle_limit_frees_the_connection(every_frontend) -> None:
    """limits.stream_idle_s (1.5 s here) ends a session whose client went quiet: what came
    is spoken, `error` code `stream-idle`, `synthesize-stopped`; the next request on the
    same connection is served at once (it used to wait for `synthesize-stop`)."""

    async def exchange() -> tuple[list[Event], list[Event], list[Event]]:
        async with AsyncTcpClient("127.0.0.1", every_frontend.wyoming_port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="The porch light is on. And").event())
            ended = await _until(client, "synthesize-stopped")  # the client sends no stop
            await client.write_event(Synthesize(text="Okay.").event())
            one_shot = await _until(client, "audio-stop")
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="A new session.").event())
            await client.write_event(SynthesizeStop().event())
            return ended, one_shot, await _until(client, "synthesize-stopped")

    ended, one_shot, session = asyncio.run(exchange())
    assert _codes(ended) == ["stream-idle"]
    assert [e.type for e in ended].count("audio-chunk") > 0  # what came was spoken
    assert [e.type for e in ended][-2:] == ["audio-stop", "synthesize-stopped"]
    assert one_shot[0].type == "audio-start" and not _codes(one_shot)
    assert not _codes(session) and [e.type for e in session][-1] == "synthesize-stopped"
