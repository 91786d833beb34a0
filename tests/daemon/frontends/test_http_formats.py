"""Formats and sample rates end to end, and the speech WebSocket: the official `openai`
SDK (mp3 by default, every format), httpx (/tts at 16 kHz), the `websockets` package
(text in pieces, Flush, Clear, hostile frames), against one daemon for the module."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time

import av
import httpx
import numpy as np
import pytest
import websockets

from ...harness import free_port, make_daemon

KEY = "formats-key"
SENTENCE = "The kitchen lights are off and the oven is cold."
PIECES = [
    "The kitch",
    "en lights are ",
    "off and ",
    "the oven",
    " is cold. The back",
    " door",
    " is locked.",
]


@pytest.fixture(scope="module")
def formats_daemon(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("formats")
    (folder / "api-key").write_text(KEY + "\n")
    port = free_port()
    proc = make_daemon(
        folder,
        broker.port,
        prepared_state,
        http__enabled="true",
        http__port=str(port),
        http__api_key_file=str(folder / "api-key"),
        http__rate_per_minute="1000",
        limits__client_stall_s="2",
        limits__stream_idle_s="2",
        engine__workers="2",
    ).start()
    proc.url = f"http://127.0.0.1:{port}"
    proc.ws = f"ws://127.0.0.1:{port}/v1/audio/speech/ws"
    yield proc
    proc.stop()


@pytest.fixture
def client(formats_daemon):
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=formats_daemon.url, headers=headers, timeout=60) as session:
        yield session


def decode(data: bytes, rate: int = 22050) -> np.ndarray:
    """Mono s16 samples at `rate`, decoded by FFmpeg (as a client's player would)."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    chunks = []
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(chunks)


def test_openai_sdk_gets_mp3_by_default_and_every_format(formats_daemon, recognizer) -> None:
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{formats_daemon.url}/v1", api_key=KEY, max_retries=0, timeout=60)
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=SENTENCE
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        mp3 = b"".join(response.iter_bytes())
    pcm = decode(mp3)
    rate, heard = recognizer.wer_pcm(pcm, 22050, SENTENCE)
    assert rate <= 0.1, heard
    lengths = {"mp3": len(pcm) / 22050}
    for fmt in ("opus", "aac", "flac", "wav", "pcm"):
        data = sdk.audio.speech.create(
            model="tts-1", voice="alloy", input=SENTENCE, response_format=fmt
        ).read()
        samples = np.frombuffer(data, "<i2") if fmt == "pcm" else decode(data)
        lengths[fmt] = len(samples) / 22050
    for fmt, seconds in lengths.items():
        assert seconds == pytest.approx(lengths["wav"], rel=0.1), (fmt, lengths)


def test_whole_files_and_sse_in_a_format(client) -> None:
    whole = client.post("/tts", json={"text": SENTENCE, "response_format": "flac"})
    assert whole.status_code == 200 and whole.headers["content-type"] == "audio/flac"
    assert int(whole.headers["content-length"]) == len(whole.content)
    assert len(decode(whole.content)) > 22050
    body = {"input": SENTENCE, "stream_format": "sse", "sample_rate": 24000}
    sse = client.post("/v1/audio/speech", json=body)
    assert sse.headers["x-audio-content-type"] == "audio/mpeg"
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == {"type": "speech.audio.done"}
    audio = b"".join(__import__("base64").b64decode(e["audio"]) for e in events[:-1])
    assert sse.headers["x-sample-rate"] == "24000" and len(decode(audio, 24000)) > 24000


def test_tts_at_16_khz(client) -> None:
    reply = client.post("/tts", json={"text": SENTENCE, "sample_rate": 16000})
    assert reply.status_code == 200 and reply.headers["content-type"] == "audio/wav"
    assert reply.headers["x-sample-rate"] == "16000"
    assert int.from_bytes(reply.content[24:28], "little") == 16000  # the WAV says so too
    seconds = (len(reply.content) - 44) / 2 / 16000
    pieces = (p.encode() for p in PIECES)
    streamed = client.post(
        "/tts/stream?response_format=opus&sample_rate=16000",
        content=pieces,
        headers={"Content-Type": "text/plain"},
    )
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("audio/ogg")
    with av.open(io.BytesIO(streamed.content)) as container:
        assert container.streams.audio[0].codec_context.name == "opus"
    assert seconds > 1.0


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/audio/speech", {"input": "Hi.", "response_format": "ogg"}, "response_format"),
        ("/v1/audio/speech", {"input": "Hi.", "sample_rate": 7000}, "sample_rate"),
        ("/v1/audio/speech", {"input": "Hi.", "sample_rate": "16000"}, "sample_rate"),
        ("/tts", {"text": "Hi.", "response_format": "opus", "sample_rate": 22050}, "sample_rate"),
        ("/tts/stream", {"text": "Hi.", "sample_rate": 96000}, "sample_rate"),
    ],
)
def test_a_bad_format_or_rate_is_a_400_naming_the_field(client, route, body, field) -> None:
    reply = client.post(route, json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].startswith(f'"{field}"')


# -- the WebSocket ------------------------------------------------------------------------------


def connect(daemon, query: str = "", **kwargs):
    headers = {"Authorization": f"Bearer {KEY}"}
    return websockets.connect(f"{daemon.ws}{query}", additional_headers=headers, **kwargs)


async def until_event(ws, kind: str) -> tuple[bytes, dict]:
    """Audio received before the JSON event `kind`, and that event."""
    audio = bytearray()
    while True:
        message = await asyncio.wait_for(ws.recv(), 60)
        if isinstance(message, bytes):
            audio += message
            continue
        event = json.loads(message)
        if event["type"] == kind:
            return bytes(audio), event
        assert event["type"] not in ("Error", "Flushed", "Cleared"), event


def test_socket_text_in_seven_pieces_gets_audio_then_flushed(formats_daemon, recognizer) -> None:
    async def run() -> tuple[bytes, dict, bytes]:
        async with connect(formats_daemon, "?encoding=linear16&sample_rate=16000") as ws:
            for piece in PIECES:
                await ws.send(json.dumps({"type": "Speak", "text": piece}))
            await ws.send(json.dumps({"type": "Flush"}))
            audio, flushed = await until_event(ws, "Flushed")
            await ws.send(json.dumps({"type": "Speak", "text": "Okay."}))
            await ws.send(json.dumps({"type": "Close"}))
            second, _ = await until_event(ws, "Flushed")
            await asyncio.wait_for(ws.wait_closed(), 10)
            return audio, flushed, second

    audio, flushed, second = asyncio.run(run())
    assert flushed["sequence_id"] == 1 and len(second) > 0
    rate, heard = recognizer.wer_pcm(np.frombuffer(audio, "<i2"), 16000, "".join(PIECES))
    assert rate <= 0.1, heard


def test_socket_clear_stops_and_drops(formats_daemon) -> None:
    long_text = "The weather report for the whole week is long and detailed. " * 12

    async def run() -> tuple[dict, bytes]:
        async with connect(formats_daemon, "?encoding=mp3") as ws:
            await ws.send(json.dumps({"type": "Speak", "text": long_text}))
            await ws.send(json.dumps({"type": "Flush"}))
            assert isinstance(await asyncio.wait_for(ws.recv(), 60), bytes)  # speaking
            await ws.send(json.dumps({"type": "Clear"}))
            _, cleared = await until_event(ws, "Cleared")
            await ws.send(json.dumps({"type": "Speak", "text": "Done."}))
            await ws.send(json.dumps({"type": "Flush"}))
            after, _ = await until_event(ws, "Flushed")
            return cleared, after

    started = time.monotonic()
    cleared, after = asyncio.run(run())
    assert cleared["type"] == "Cleared" and len(decode(after)) > 0
    assert time.monotonic() - started < 20  # a minute of speech was not all made


def test_socket_text_without_flush_is_spoken_then_the_idle_socket_closes(formats_daemon) -> None:
    async def run() -> tuple[bytes, dict, dict]:
        async with connect(formats_daemon) as ws:
            await ws.send(json.dumps({"type": "Speak", "text": "Nobody flushes this."}))
            audio, warning = await until_event(ws, "Warning")  # limits.stream_idle_s: 2 s
            _, idle = await until_event(ws, "Warning")
            await asyncio.wait_for(ws.wait_closed(), 10)
            return audio, warning, idle

    audio, warning, idle = asyncio.run(run())
    assert warning["code"] == "stream-idle" and warning["sequence_id"] == 1 and audio
    assert idle["code"] == "idle"


def test_socket_hostile_frames_get_errors_and_the_daemon_serves(formats_daemon, client) -> None:
    async def run() -> list[dict]:
        errors = []
        async with connect(formats_daemon, max_size=None) as ws:
            too_long = json.dumps({"type": "Speak", "text": "word " * 2001})  # > max_text_chars
            frames = ("{not json", b"\x00\x01", '{"type": "Dance"}', '{"type": "Speak"}', "[]")
            for frame in (*frames, too_long):
                await ws.send(frame)
                errors.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            await ws.send(json.dumps({"type": "Speak", "text": "x" * 300_000}))  # over the limit
            await asyncio.wait_for(ws.wait_closed(), 10)
            assert ws.close_code == 1009
        return errors

    errors = asyncio.run(run())
    assert [e["type"] for e in errors] == ["Error"] * 6
    assert [e["code"] for e in errors[:3]] == ["bad_json", "bad_message", "bad_message"]
    assert errors[-1]["code"] == "too-long"
    for query, status in (("?encoding=ogg", 400), ("?sample_rate=100", 400), ("?voice=nope", 400)):
        with pytest.raises(websockets.InvalidStatus) as refused:
            asyncio.run(connect(formats_daemon, query).__aenter__())
        assert refused.value.response.status_code == status
    with pytest.raises(websockets.InvalidStatus) as anonymous:
        asyncio.run(websockets.connect(formats_daemon.ws).__aenter__())
    assert anonymous.value.response.status_code == 401
    assert client.post("/tts", json={"text": "Still here."}).status_code == 200


def test_socket_client_that_never_reads_is_cut_off(formats_daemon, client) -> None:
    """A client that sends a long text and reads nothing is cut off after the stall
    limit (2 s here); the daemon goes on serving."""
    port = int(formats_daemon.url.rsplit(":", 1)[1])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", port))
    raw.sendall(
        b"GET /v1/audio/speech/ws?sample_rate=48000 HTTP/1.1\r\nHost: x\r\n"
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        + f"Authorization: Bearer {KEY}\r\n\r\n".encode()
    )
    for message in (
        {"type": "Speak", "text": "A long story begins here. " * 40},
        {"type": "Flush"},
    ):
        payload = json.dumps(message).encode()
        size = (
            bytes([0x80 | len(payload)])
            if len(payload) < 126
            else b"\xfe" + len(payload).to_bytes(2, "big")
        )
        raw.sendall(b"\x81" + size + b"\0\0\0\0" + payload)  # masked with a zero key
    log = formats_daemon.folder / "daemon.log"
    deadline = time.monotonic() + 30
    while "WebSocket took nothing" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)  # made, not read: the stall limit passes, it is cut off
    assert "WebSocket took nothing" in log.read_text()
    raw.settimeout(10)
    received = 0
    while chunk := raw.recv(65536):  # what was buffered, then the end: cut off
        received += len(chunk)
    raw.close()
    assert received < 48000 * 2 * 40  # far from the whole story
    assert client.post("/tts", json={"text": "Still here."}).status_code == 200
