"""The Wyoming frontend end to end: the `wyoming` package's own TCP client against the
daemon, as Home Assistant drives it (describe, one-shot, streaming), bad input included."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from ...conftest import write_wav
from ...harness import Probe, free_port, make_daemon

REPLY = (
    "The living room lights are now off. Tomorrow will be sunny with a light breeze. "
    "Your next meeting starts at ten in the morning."
)


@pytest.fixture(scope="module")
def wyoming_daemon(tmp_path_factory, broker, prepared_state):
    port = free_port()
    proc = make_daemon(
        tmp_path_factory.mktemp("wyoming"),
        broker.port,
        prepared_state,
        wyoming__enabled="true",
        wyoming__port=str(port),
        limits__max_text_chars="2000",
        limits__client_stall_s="3",
    ).start()
    proc.wyoming_port = port
    yield proc
    proc.stop()


@dataclass
class Reply:
    events: list[tuple[float, Event]] = field(default_factory=list)

    @property
    def types(self) -> list[str]:
        return [e.type for _, e in self.events]

    def first(self, kind: str) -> float:
        return next(at for at, e in self.events if e.type == kind)

    def pcm(self) -> np.ndarray:
        data = b"".join(e.payload or b"" for _, e in self.events if AudioChunk.is_type(e.type))
        return np.frombuffer(data, dtype="<i2")

    def errors(self) -> list[dict]:
        return [e.data for _, e in self.events if e.type == "error"]


async def _read_until(client: AsyncTcpClient, reply: Reply, last: str, timeout: float) -> Reply:
    deadline = time.monotonic() + timeout
    while True:
        event = await asyncio.wait_for(client.read_event(), deadline - time.monotonic())
        if event is None:
            return reply
        reply.events.append((time.monotonic(), event))
        if event.type == last:
            return reply


async def _exchange(port: int, events: list[Event], last: str, timeout: float = 60) -> Reply:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
        return await _read_until(client, Reply(), last, timeout)


async def _ha_stream(port: int, text: str, piece: int = 7, every_s: float = 0.03):
    """Home Assistant's streaming sequence: start, chunks not aligned to words, the
    full text again as `synthesize` (for old servers), stop; read concurrently."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        reply = Reply()
        reader = asyncio.create_task(_read_until(client, reply, "synthesize-stopped", 60))
        await client.write_event(SynthesizeStart().event())
        for start in range(0, len(text), piece):
            await client.write_event(SynthesizeChunk(text=text[start : start + piece]).event())
            await asyncio.sleep(every_s)
        await client.write_event(Synthesize(text=text).event())
        stop_sent = time.monotonic()
        await client.write_event(SynthesizeStop().event())
        await reader
        return reply, stop_sent


def run(coro):
    return asyncio.run(coro)


def test_describe_lists_a_streaming_tts_program_and_its_voices(wyoming_daemon) -> None:
    reply = run(_exchange(wyoming_daemon.wyoming_port, [Describe().event()], "info"))
    info = Info.from_event(reply.events[-1][1])
    program = info.tts[0]
    assert program.installed and program.supports_synthesize_streaming
    assert program.name == "magpie-tts" and program.version
    voice = program.voices[0]
    assert voice.name == "en_US-joe-medium" and voice.installed
    assert voice.languages == ["en_US"] and voice.speakers is None


def test_one_shot_streams_one_audio_start_many_chunks_one_stop(
    wyoming_daemon, recognizer, tmp_path
) -> None:
    request = Synthesize(text=REPLY, voice=SynthesizeVoice(name="en_US-joe-medium"))
    reply = run(_exchange(wyoming_daemon.wyoming_port, [request.event()], "audio-stop"))
    assert reply.types.count("audio-start") == 1 and reply.types[-1] == "audio-stop"
    assert reply.types[0] == "audio-start"
    chunks = [e for _, e in reply.events if e.type == "audio-chunk"]
    start = reply.events[0][1].data
    assert (start["rate"], start["width"], start["channels"]) == (22050, 2, 1)
    # audio leaves as it is decoded: the first chunk is a small part of the whole
    assert len(chunks) >= 4 and len(chunks[0].payload) < len(reply.pcm()) * 2 / 4
    rate, heard = recognizer.wer(write_wav(tmp_path / "one.wav", reply.pcm(), 22050), REPLY)
    assert rate <= 0.1, heard


def test_home_assistant_streaming_sequence(wyoming_daemon, recognizer, tmp_path) -> None:
    reply, stop_sent = run(_ha_stream(wyoming_daemon.wyoming_port, REPLY))
    assert reply.types.count("audio-start") == 1
    assert reply.types[-2:] == ["audio-stop", "synthesize-stopped"]
    assert reply.errors() == []
    # speech began at the first clause, while the text was still arriving
    assert reply.first("audio-chunk") < stop_sent
    rate, heard = recognizer.wer(write_wav(tmp_path / "ha.wav", reply.pcm(), 22050), REPLY)
    assert rate <= 0.1, heard


def test_two_clients_at_once(wyoming_daemon, recognizer, tmp_path) -> None:
    texts = [
        "The garage door is closed and the porch light is on.",
        "It is raining in the garden, so the lawn will not be watered today.",
    ]

    async def both():
        port = wyoming_daemon.wyoming_port
        one = _exchange(port, [Synthesize(text=texts[0]).event()], "audio-stop")
        two = _ha_stream(port, texts[1])
        return await asyncio.gather(one, two)

    one, (two, _) = run(both())
    rates = []
    for index, (reply, text) in enumerate(((one, texts[0]), (two, texts[1]))):
        assert reply.types.count("audio-start") == 1 and reply.errors() == []
        wav = write_wav(tmp_path / f"both{index}.wav", reply.pcm(), 22050)
        rate, heard = recognizer.wer(wav, text)
        assert rate <= 0.5, heard  # speech, not garbage, on each connection
        rates.append(rate)
    assert sum(rates) / len(rates) <= 0.1, rates  # one misheard word is not a failure


def _raw_exchange(port: int, data: bytes, timeout: float = 10) -> list[dict]:
    """Send raw bytes (malformed framing a real client cannot produce); read headers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    events = []
    for line in received.split(b"\n"):
        try:
            header = json.loads(line)
        except ValueError:
            continue  # data or payload bytes
        if isinstance(header, dict) and "type" in header:
            events.append(header)
    return events


BAD_EVENTS = [
    (
        Synthesize(text="Hello", voice=SynthesizeVoice(name="no-such-voice")).event(),
        "unknown-voice",
    ),
    (Synthesize(text="").event(), "empty-text"),
    (Synthesize(text="   ").event(), "empty-text"),
    (Synthesize(text="word " * 500).event(), "too-long"),
    (Synthesize(text="<b>Hi</b>").event(), "bad-text"),
    (Synthesize(text="<speak>Hi</spek>").event(), "bad-ssml"),
    (Synthesize(text="bell \x07 here").event(), "bad-text"),
    (Synthesize(text="...!?").event(), "empty-text"),
    (Event(type="synthesize", data={"text": 42}), "bad-request"),
    (Event(type="synthesize", data={"text": "Hi", "voice": "joe"}), "bad-request"),
    (Event(type="synthesize", data={}), "bad-request"),
    (Event(type="transcribe", data={}), "unknown-event"),
    (SynthesizeChunk(text="outside a session").event(), "no-session"),
    (SynthesizeStop().event(), "no-session"),
]


@pytest.mark.parametrize("event,code", BAD_EVENTS, ids=[c for _, c in BAD_EVENTS])
def test_bad_event_gets_an_error_and_the_connection_keeps_serving(
    wyoming_daemon, event, code
) -> None:
    async def exchange():
        async with AsyncTcpClient("127.0.0.1", wyoming_daemon.wyoming_port) as client:
            await client.write_event(event)
            error = await _read_until(client, Reply(), "error", 30)
            await client.write_event(Synthesize(text="Okay.").event())
            after = await _read_until(client, Reply(), "audio-stop", 30)
            return error, after

    error, after = run(exchange())
    assert error.types == ["error"]
    assert error.errors()[0]["code"] == code and error.errors()[0]["text"]
    assert after.types[0] == "audio-start" and after.types[-1] == "audio-stop"


@pytest.mark.parametrize(
    "data,words",
    [
        (b"this is not json\n", "not a JSON line"),
        (b'{"data": {}}\n', '"type"'),
        (b'{"type": "synthesize", "data_length": 1000000000}\n', "data_length"),
        (b'{"type": "synthesize", "data_length": 5}\n\xff\xfe\xfd{}', "UTF-8"),
        (b"x" * 70000 + b"\n", "longer than"),
    ],
)
def test_malformed_framing_is_answered_then_closed(wyoming_daemon, data, words) -> None:
    events = _raw_exchange(wyoming_daemon.wyoming_port, data)
    assert [e["type"] for e in events] == ["error"]
    assert wyoming_daemon.alive()
    reply = run(
        _exchange(wyoming_daemon.wyoming_port, [Synthesize(text="Okay.").event()], "audio-stop")
    )
    assert reply.types[-1] == "audio-stop"


def test_stream_pieces_with_markup_are_refused_and_the_rest_spoken(wyoming_daemon) -> None:
    async def exchange():
        async with AsyncTcpClient("127.0.0.1", wyoming_daemon.wyoming_port) as client:
            reply = Reply()
            reader = asyncio.create_task(_read_until(client, reply, "synthesize-stopped", 60))
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="The oven is preheated. ").event())
            await client.write_event(SynthesizeChunk(text="<b>bold</b>").event())
            await client.write_event(SynthesizeStop().event())
            await reader
            return reply

    reply = run(exchange())
    assert [e["code"] for e in reply.errors()] == ["bad-text"]
    assert reply.types.count("audio-start") == 1
    assert reply.types[-2:] == ["audio-stop", "synthesize-stopped"]


def _stopped_after(probe: Probe, base: str, before: int, timeout: float) -> dict:
    return probe.wait(
        f"{base}/status",
        lambda s: s.get("streams", {}).get("stopped", 0) > before,
        timeout=timeout,
    )[-1]


def _streams(probe: Probe, base: str) -> dict:
    found = probe.wait(f"{base}/status", lambda s: "streams" in s, timeout=10)
    return found[-1]["streams"]


def test_disconnect_mid_one_shot_stops_its_synthesis(wyoming_daemon, broker) -> None:
    long_text = " ".join(["The weather report for the whole week is long and detailed."] * 28)
    base = wyoming_daemon.base
    probe = Probe(broker.port, [f"{base}/status"])
    try:

        async def hang_up():
            async with AsyncTcpClient("127.0.0.1", wyoming_daemon.wyoming_port) as client:
                await client.write_event(Synthesize(text=long_text).event())
                await _read_until(client, Reply(), "audio-chunk", 30)
            return time.monotonic()

        before = _streams(probe, base).get("stopped", 0)
        left_at = run(hang_up())
        status = _stopped_after(probe, base, before, timeout=10)
        # about two minutes of speech would take seconds to make: it stopped at once
        assert time.monotonic() - left_at < 3.0
        assert status["streams"]["active"] == 0
    finally:
        probe.close()
    assert wyoming_daemon.alive()


def test_disconnect_mid_streaming_session_ends_it_without_waiting_for_idle(
    wyoming_daemon, broker
) -> None:
    base = wyoming_daemon.base
    probe = Probe(broker.port, [f"{base}/status"])
    try:

        async def hang_up():
            async with AsyncTcpClient("127.0.0.1", wyoming_daemon.wyoming_port) as client:
                await client.write_event(SynthesizeStart().event())
                await client.write_event(SynthesizeChunk(text="The first part, and then").event())
                await asyncio.sleep(0.5)

        before = _streams(probe, base).get("stopped", 0)
        run(hang_up())
        status = _stopped_after(probe, base, before, timeout=10)  # idle limit: 30 s
        assert status["streams"]["active"] == 0
    finally:
        probe.close()


def test_client_that_never_reads_is_cut_off(wyoming_daemon, broker) -> None:
    """Bounded buffering: a client that stops reading blocks only its own synthesis and
    is cut off after limits.client_stall_s (3 s here), not fed two minutes of audio."""
    long_text = " ".join(["The weather report for the whole week is long and detailed."] * 28)
    base = wyoming_daemon.base
    probe = Probe(broker.port, [f"{base}/status"])
    try:
        before = _streams(probe, base).get("stopped", 0)
        with socket.create_connection(("127.0.0.1", wyoming_daemon.wyoming_port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            data = json.dumps({"text": long_text}).encode()
            header = {"type": "synthesize", "data_length": len(data)}
            sock.sendall(json.dumps(header).encode() + b"\n" + data)
            status = _stopped_after(probe, base, before, timeout=30)  # never reads
        assert status["streams"]["active"] == 0
        # while it hung, others were served
        okay = Synthesize(text="Okay.").event()
        assert run(_exchange(wyoming_daemon.wyoming_port, [okay], "audio-stop")).types[-1] == (
            "audio-stop"
        )
    finally:
        probe.close()
