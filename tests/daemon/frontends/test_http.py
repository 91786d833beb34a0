"""The HTTP frontend end to end: a real HTTP client (httpx) against the daemon: the
OpenAI speech API, /tts, streamed text in, the speaker, /health, /metrics, bad input."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time

import httpx
import numpy as np
import pytest

from ...conftest import write_wav
from ...harness import free_port, make_daemon, wait_port

# (not the bench's medium sentence: the recognizer hears "in Boston" as "embossed in"
# about one time in ten)
SENTENCE = (
    "The kitchen lights are off and the oven is cold. "
    "The back door is locked, and the garden lights will turn on at eight."
)
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def http_daemon(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("http")
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
        limits__max_text_chars="2000",
        limits__client_stall_s="3",
        engine__workers="2",  # a server's setting: concurrent clients side by side
    ).start()
    proc.url = f"http://127.0.0.1:{port}"
    proc.http_port = port
    yield proc
    proc.stop()


@pytest.fixture
def client(http_daemon):
    with httpx.Client(
        base_url=http_daemon.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    ) as session:
        yield session


def pcm_of_wav(data: bytes) -> tuple[int, np.ndarray, int]:
    """(rate, samples, declared data size) of a 44-byte-header PCM WAV."""
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data", data[:48]
    rate = struct.unpack("<I", data[24:28])[0]
    declared = struct.unpack("<I", data[40:44])[0]
    return rate, np.frombuffer(data[44 : 44 + (len(data) - 44) // 2 * 2], "<i2"), declared


def intelligible(recognizer, tmp_path, pcm, text, name="http.wav") -> None:
    rate, heard = recognizer.wer(write_wav(tmp_path / name, pcm, 22050), text)
    assert rate <= 0.1, heard


def test_openai_speech_streams_a_wav_of_unknown_length(client, recognizer, tmp_path) -> None:
    body = {"model": "tts-1", "input": SENTENCE, "voice": "alloy", "response_format": "wav"}
    arrivals = []
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/wav"
        assert response.headers["x-sample-rate"] == "22050"
        assert response.headers.get("transfer-encoding") == "chunked"
        started = time.monotonic()
        data = b""
        for piece in response.iter_raw():
            arrivals.append(time.monotonic() - started)
            data += piece
    rate, pcm, declared = pcm_of_wav(data)
    assert rate == 22050 and declared == 0xFFFFFFFF
    # really streamed: bytes came in several pieces spread over the synthesis
    assert len(arrivals) >= 3 and arrivals[-1] - arrivals[0] > 0.05
    intelligible(recognizer, tmp_path, pcm, SENTENCE)


def test_the_official_openai_sdk_streams_speech(http_daemon, recognizer, tmp_path) -> None:
    """As an LLM app calls it: the official SDK's streaming response, wav and pcm."""
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{http_daemon.url}/v1", api_key=KEY, max_retries=0, timeout=60)
    text = "The front door is locked and the porch light is on."
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as response:
        pieces = list(response.iter_bytes())
    _rate, pcm, _declared = pcm_of_wav(b"".join(pieces))
    intelligible(recognizer, tmp_path, pcm, text, "sdk.wav")
    raw = sdk.audio.speech.create(
        model="gpt-4o-mini-tts", voice="nova", input=text, response_format="pcm", speed=1.2
    ).read()
    assert len(raw) % 2 == 0 and len(raw) > 22050  # over half a second of 16-bit audio
    wrong = OpenAI(base_url=f"{http_daemon.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(Exception) as refused:
        wrong.audio.speech.create(model="tts-1", voice="alloy", input=text)
    assert getattr(refused.value, "status_code", None) == 401


def test_openai_pcm_and_sse(client, recognizer, tmp_path) -> None:
    text = "Your timer for the pasta is done. Please drain the water now."
    pcm = client.post(
        "/v1/audio/speech", json={"input": text, "voice": "nova", "response_format": "pcm"}
    )
    assert pcm.status_code == 200 and pcm.headers["content-type"] == "audio/pcm"
    raw = np.frombuffer(pcm.content, "<i2")
    intelligible(recognizer, tmp_path, raw, text, "pcm.wav")
    sse = client.post(
        "/v1/audio/speech",
        json={"input": text, "response_format": "pcm", "stream_format": "sse"},
    )
    assert sse.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    deltas = [e for e in events[:-1] if e["type"] == "speech.audio.delta"]
    assert len(deltas) == len(events) - 1 and len(deltas) >= 2
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    intelligible(recognizer, tmp_path, np.frombuffer(audio, "<i2"), text, "sse.wav")


def test_tts_whole_wav_and_stream(client, recognizer, tmp_path) -> None:
    text = "The dishwasher has finished. The dishes are clean and dry."
    whole = client.post("/tts", json={"text": text, "speed": 1.0})
    assert whole.status_code == 200 and "content-length" in whole.headers
    _rate, pcm, declared = pcm_of_wav(whole.content)
    assert declared == len(pcm) * 2  # a real size: the whole file at once
    intelligible(recognizer, tmp_path, pcm, text, "whole.wav")
    streamed = client.post("/tts/stream", json={"text": text})
    assert pcm_of_wav(streamed.content)[2] == 0xFFFFFFFF
    assert (
        client.post("/tts", json={"text": text, "stream": True}).headers.get("transfer-encoding")
        == "chunked"
    )


def test_streamed_text_body_is_spoken_as_it_arrives(http_daemon, recognizer, tmp_path) -> None:
    """Raw chunked upload (a generic client reads the answer only after sending): the
    first audio bytes arrive while the text is still being sent."""
    text = "The front door is now locked. The porch light will turn off at midnight."
    pieces = [text[i : i + 9] for i in range(0, len(text), 9)]
    with socket.create_connection(("127.0.0.1", http_daemon.http_port), timeout=30) as sock:
        sock.sendall(
            b"POST /tts/stream?speed=1.0 HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        received = bytearray()
        first_audio_at: list[float] = []

        def read() -> None:
            while chunk := sock.recv(65536):
                if not first_audio_at and b"RIFF" in received + chunk:
                    first_audio_at.append(time.monotonic())
                received.extend(chunk)
                if received.endswith(b"0\r\n\r\n"):
                    return

        reader = threading.Thread(target=read)
        reader.start()
        for piece in pieces:
            data = piece.encode()
            sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            time.sleep(0.1)
        last_piece_at = time.monotonic()
        sock.sendall(b"0\r\n\r\n")
        reader.join(30)
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert first_audio_at and first_audio_at[0] < last_piece_at
    audio = _dechunk(body)
    intelligible(recognizer, tmp_path, pcm_of_wav(audio)[1], text, "body.wav")


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


def test_five_concurrent_clients_all_intelligible(http_daemon, recognizer, tmp_path) -> None:
    texts = [
        "The garage door is closed.",
        "It will rain in the afternoon, so bring an umbrella.",
        "Your package was delivered to the front porch.",
        "The living room is at twenty one degrees.",
        "Dinner is ready, please come to the table.",
    ]
    results: dict[int, bytes] = {}

    def fetch(index: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as session:
            reply = session.post(
                f"{http_daemon.url}/v1/audio/speech",
                json={"input": texts[index], "response_format": "wav"},
            )
            assert reply.status_code == 200, reply.text
            results[index] = reply.content

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == list(range(5))
    # Each stream must be speech (per-stream bound catches garbage); the mean carries the
    # 0.1 bar, so one misheard word of a short sentence is not a failure.
    rates = []
    for index, text in enumerate(texts):
        wav = write_wav(tmp_path / f"c{index}.wav", pcm_of_wav(results[index])[1], 22050)
        rate, heard = recognizer.wer(wav, text)
        assert rate <= 0.5, heard
        rates.append(rate)
    assert sum(rates) / len(rates) <= 0.1, rates


def test_say_on_the_speaker_through_the_queue(
    http_daemon, client, recognizer, tmp_path, probe
) -> None:
    text = "The washing machine has finished its cycle. Please hang up the laundry."
    before = len(http_daemon.recorded())
    reply = client.post("/v1/say", json={"text": text, "id": "http-1", "wait": True})
    assert reply.status_code == 200, reply.text
    assert reply.json()["event"] == "finished" and reply.json()["ttfa_ms"] > 0
    # the same events as MQTT's own requests, on <base>/events
    probe.wait(
        f"{http_daemon.base}/events", lambda e: e["id"] == "http-1" and e["event"] == "finished"
    )
    assert probe.events(http_daemon.base, "http-1") == ["queued", "started", "finished"]
    time.sleep(0.2)
    intelligible(recognizer, tmp_path, http_daemon.recorded()[before:], text, "say.wav")
    queued = client.post("/v1/say", json={"text": "Okay."})
    assert queued.status_code == 202 and queued.json()["event"] == "queued"
    assert client.post("/v1/stop", json={"id": "nobody"}).status_code == 404


def test_voices_models_health_metrics(client) -> None:
    voices = client.get("/v1/audio/voices").json()
    assert voices["voices"][0]["name"] == "en_US-joe-medium" and "alloy" in voices["aliases"]
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and "tts-1" in {m["id"] for m in models["data"]}
    health = client.get("/health")
    assert health.status_code == 200
    assert health.json()["state"] == "ready" and health.json()["provider"] == "cpu"
    assert health.json()["selftest"]["passed"] in (True, False)
    client.post("/v1/audio/speech", json={"input": "Counting this one."})
    client.post("/v1/audio/speech", json={"input": ""})
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'magpie_first_audio_seconds_count{frontend="http"}' in text
    assert 'magpie_utterances_total{frontend="http",outcome="finished"}' in text
    assert 'magpie_errors_total{frontend="http",kind="bad_request"}' in text or (
        'magpie_errors_total{frontend="http",kind="empty-text"}' in text
    )
    for name in ("magpie_queue_depth", "magpie_active_streams", "magpie_xruns", "magpie_rtf"):
        assert name in text


BAD_REQUESTS = [
    ("/v1/audio/speech", b"{not json", 400, "bad_json"),
    ("/v1/audio/speech", b"\xff\xfe", 400, "bad_json"),
    ("/v1/audio/speech", b"[1, 2]", 400, "bad_json"),
    ("/v1/audio/speech", json.dumps({"input": 5}).encode(), 400, "bad_request"),
    ("/v1/audio/speech", json.dumps({"voice": "alloy"}).encode(), 400, "bad_request"),
    ("/v1/audio/speech", json.dumps({"input": ""}).encode(), 400, "empty-text"),
    ("/v1/audio/speech", json.dumps({"input": "…!?"}).encode(), 400, "empty-text"),
    ("/v1/audio/speech", b'{"input": "Hi", "speed": NaN}', 400, "bad_json"),
    ("/v1/audio/speech", json.dumps({"input": "Hi", "speed": 9}).encode(), 400, "bad_request"),
    (
        "/v1/audio/speech",
        json.dumps({"input": "Hi", "voice": "nope"}).encode(),
        400,
        "unknown-voice",
    ),
    (
        "/v1/audio/speech",
        json.dumps({"input": "Hi", "response_format": "ogg"}).encode(),
        400,
        "unsupported_format",
    ),
    ("/v1/audio/speech", json.dumps({"input": "<b>x</b>"}).encode(), 400, "bad-text"),
    ("/v1/audio/speech", json.dumps({"input": "<speak>x</spek>"}).encode(), 400, "bad-ssml"),
    ("/v1/audio/speech", json.dumps({"input": "a\x07b"}).encode(), 400, "bad-text"),
    ("/v1/audio/speech", json.dumps({"input": "word " * 500}).encode(), 413, "too-long"),
    ("/v1/audio/speech", b"x" * 20000, 413, "too-long"),
    ("/tts", json.dumps({"text": "Hi", "stream": "maybe"}).encode(), 400, "bad_request"),
    ("/tts", json.dumps({"text": "Hi", "speaker_id": [1]}).encode(), 400, "bad_request"),
    ("/v1/say", json.dumps({"text": "Hi", "priority": "urgent"}).encode(), 400, "bad_request"),
    ("/v1/say", json.dumps({"text": "Hi", "volume": "loud"}).encode(), 400, "bad_request"),
    # wrong values are refused, never cut or ignored (MQTT refuses them too)
    ("/tts", json.dumps({"text": "Hi", "speaker_id": 999}).encode(), 400, "unknown-voice"),
    ("/v1/say", json.dumps({"text": "Hi", "id": "x" * 200}).encode(), 400, "bad_request"),
    ("/v1/say", json.dumps({"text": "Hi", "cache": "yes"}).encode(), 400, "bad_request"),
]


@pytest.mark.parametrize("path,body,status,code", BAD_REQUESTS)
def test_bad_requests_get_clear_json_errors(client, path, body, status, code) -> None:
    reply = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code and error["message"]
    assert client.get("/health").status_code == 200  # still serving


def test_wrong_or_missing_key_is_401(http_daemon) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        reply = httpx.post(
            f"{http_daemon.url}/v1/audio/speech", json={"input": "Hi"}, headers=headers
        )
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "auth"
    assert KEY not in http_daemon.log()


def test_client_that_never_reads_is_cut_off(http_daemon, client) -> None:
    """A client that stops reading is cancelled after a bounded buffer (stall 3 s)."""
    long_text = " ".join(["The weather report for the whole week is long and detailed."] * 28)
    payload = json.dumps({"input": long_text, "response_format": "pcm"}).encode()
    with socket.create_connection(("127.0.0.1", http_daemon.http_port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # never reads; wait for the daemon to give up
            status = client.get("/health").json()
            if _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}'):
                break
            time.sleep(0.5)
    assert _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}') >= 1
    assert _metric(client, "magpie_active_streams") == 0
    assert status["state"] == "ready"


def _metric(client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_disconnect_stops_synthesis(http_daemon, client) -> None:
    long_text = " ".join(["The weather report for the whole week is long and detailed."] * 28)
    stopped_before = _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}')
    with client.stream("POST", "/v1/audio/speech", json={"input": long_text}) as response:
        next(response.iter_raw())
    left = time.monotonic()
    while time.monotonic() - left < 5:
        if _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}') > (
            stopped_before
        ):
            break
        time.sleep(0.1)
    assert _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}') > (
        stopped_before
    )
    # ~2 minutes of speech would take many seconds to make: it stopped on the hang-up
    assert time.monotonic() - left < 3.0


def test_health_is_503_while_loading(tmp_path, broker, prepared_state) -> None:
    port = free_port()
    proc = make_daemon(
        tmp_path, broker.port, prepared_state, http__enabled="true", http__port=str(port)
    ).start(wait_online=False)
    try:
        wait_port(port, timeout=30)
        first = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        speech = httpx.post(f"http://127.0.0.1:{port}/tts", json={"text": "Hi"}, timeout=10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            later = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
            if later.status_code == 200:
                break
            time.sleep(0.2)
    finally:
        proc.stop()
    assert first.status_code == 503 and first.json()["state"] == "loading"
    assert speech.status_code == 503 and speech.json()["error"]["code"] == "loading"
    assert later.status_code == 200
