"""One daemon with all three frontends on, driven by their real clients (mosquitto_pub,
httpx, the `wyoming` package): refused text never reaches the daemon's log while each
client hears why, and a Wyoming session that went idle frees its connection at once."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from ...harness import Probe, free_port, make_daemon

SECRET = "4821-secret"
MARKED = f'The door code is <note pin="{SECRET}">private</note> for today.'


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


def test_refused_markup_is_told_to_the_client_and_kept_out_of_the_log(
    every_frontend, broker
) -> None:
    daemon = every_frontend
    probe = Probe(broker.port, [f"{daemon.base}/error", "hermes/error/tts"])
    try:
        # MQTT: say, a stream piece, Hermes
        daemon.say(json.dumps({"id": "mq-say", "text": MARKED}))
        daemon.say(json.dumps({"id": "mq-stream", "text": MARKED}), "say/stream")
        hermes = {"id": "mq-hermes", "text": MARKED, "siteId": "default", "sessionId": "h"}
        daemon.say(json.dumps(hermes), "hermes/tts/say")
        ids = ("mq-say", "mq-stream", "mq-hermes")
        errors = probe.wait(f"{daemon.base}/error", lambda e: e["id"] in ids, count=3)
        hermes_errors = probe.wait("hermes/error/tts", lambda e: e.get("sessionId") == "h")
        # HTTP: a whole text, the speaker, and a streamed text body
        with httpx.Client(base_url=daemon.url, timeout=60) as http:
            speech = http.post("/v1/audio/speech", json={"input": MARKED, "voice": "alloy"})
            say = http.post("/v1/say", json={"text": MARKED})
            # (how a bad piece of a streamed body is answered is not this test's concern;
            # that its text stays out of the log is)
            pieces = (p.encode() for p in ("Hello there. ", MARKED, " Goodbye."))
            http.post("/tts/stream", content=pieces, headers={"Content-Type": "text/plain"})

        # Wyoming: one-shot and a streamed piece
        async def wyoming() -> tuple[list[Event], list[Event]]:
            async with AsyncTcpClient("127.0.0.1", daemon.wyoming_port) as client:
                await client.write_event(Synthesize(text=MARKED).event())
                one_shot = await _until(client, "error")
                await client.write_event(SynthesizeStart().event())
                await client.write_event(SynthesizeChunk(text="Hello there. ").event())
                await client.write_event(SynthesizeChunk(text=MARKED).event())
                await client.write_event(SynthesizeStop().event())
                return one_shot, await _until(client, "synthesize-stopped")

        one_shot, session = asyncio.run(wyoming())
    finally:
        probe.close()

    # each client was told why, without its text being echoed to it
    told = [e["error"] for e in errors + hermes_errors]
    told += [r.json()["error"]["message"] for r in (speech, say)]
    told += [e.data["text"] for e in one_shot + session if e.type == "error"]
    assert len(told) == 8 and all("markup" in t and SECRET not in t for t in told), told
    assert speech.status_code == say.status_code == 400
    assert speech.json()["error"]["code"] == say.json()["error"]["code"] == "bad-text"
    assert _codes(one_shot) == _codes(session) == ["bad-text"]
    # and the log has the kind of refusal, neither the text nor the reason quoting it
    log = daemon.log()
    assert "bad-text" in log and SECRET not in log and "note pin" not in log
    assert "send plain text" not in log
    assert daemon.alive()


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
