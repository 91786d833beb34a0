"""Careless and hostile clients of the network frontends, end to end (httpx and raw sockets
for HTTP, the `wyoming` package's client, mosquitto_pub): clients that hang up, trickle
their text, send bad pieces, read slowly, try to stop or squat on others' requests, or
use up the rate budget; and SIGTERM in the middle of answers. Whatever they do, others
are served, and no answer cut short looks complete."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import threading
import time

import httpx
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from ...harness import Probe, free_port, make_daemon, publish
from .test_http import _metric

SENTENCE = "The kitchen lights are off and the oven is cold. The back door is locked. "
LONG = " ".join(["The weather report for the whole week is long and detailed."] * 80)[:4900]
TERMINATOR = b"0\r\n\r\n"


@pytest.fixture(scope="module")
def hostile_daemon(tmp_path_factory, broker, prepared_state):
    port, wyoming = free_port(), free_port()
    proc = make_daemon(
        tmp_path_factory.mktemp("hostile"),
        broker.port,
        prepared_state,
        http__enabled="true",
        http__port=str(port),
        http__rate_per_minute="1000",
        http__max_file_audio_s="150",
        wyoming__enabled="true",
        wyoming__port=str(wyoming),
        limits__max_text_chars="5000",
        limits__client_stall_s="3",
        limits__max_streams="2",
        limits__max_waiting_streams="3",
        limits__rate_per_minute="60",
    ).start()
    proc.url = f"http://127.0.0.1:{port}"
    proc.http_port, proc.wyoming_port = port, wyoming
    yield proc
    proc.stop()


@pytest.fixture
def client(hostile_daemon):
    with httpx.Client(base_url=hostile_daemon.url, timeout=60) as session:
        yield session


def _wait_metric(client, name: str, done, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done(_metric(client, name)):
            break
        time.sleep(0.05)
    return _metric(client, name)


def _raw(port: int, path: str, body: bytes, content_type: str = "application/json"):
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def _text_body(port: int, path: str = "/tts/stream?response_format=pcm"):
    """A chunked text/plain upload, opened; `_piece` sends each piece."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
        + b"Content-Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return sock


def _piece(sock: socket.socket, data: bytes) -> None:
    sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _read_all(sock: socket.socket, received: bytes = b"") -> bytes:
    while chunk := sock.recv(65536):
        received += chunk
        if received.endswith(TERMINATOR) or (b"Content-Length" in received and _whole(received)):
            break
    return received


def _whole(received: bytes) -> bool:
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"Content-Length: (\d+)", head)
    return length is not None and len(body) >= int(length[1])


def _status(received: bytes) -> int:
    return int(received.split(b" ", 2)[1])


def _json_body(received: bytes) -> dict:
    return json.loads(received.partition(b"\r\n\r\n")[2])


def _wyoming(port: int, events, timeout: float = 60) -> list:
    async def go() -> list:
        async with AsyncTcpClient("127.0.0.1", port) as wy:
            for event in events:
                await wy.write_event(event)
            seen = []
            while True:
                event = await asyncio.wait_for(wy.read_event(), timeout)
                if event is None:
                    return seen
                seen.append(event)
                if event.type in ("audio-stop", "synthesize-stopped") or (
                    event.type == "error" and not any(e.type == "audio-start" for e in seen)
                ):
                    return seen

    return asyncio.run(go())


def test_hung_up_whole_file_requests_stop_and_free_their_slots(hostile_daemon, client) -> None:
    """Whole-file answers stop when their clients hang up, like streamed ones."""
    body = json.dumps({"text": LONG}).encode()
    socks = [_raw(hostile_daemon.http_port, "/tts", body) for _ in range(2)]  # every slot
    assert _wait_metric(client, "magpie_active_streams", lambda v: v == 2, 10) == 2
    time.sleep(0.05)
    for sock in socks:
        sock.close()
    left = time.monotonic()
    assert _wait_metric(client, "magpie_active_streams", lambda v: v == 0, 20) == 0
    # minutes of speech each would take far longer to make: they stopped at once
    assert time.monotonic() - left < 3.0
    assert client.post("/tts", json={"text": "Okay."}).status_code == 200


def test_trickled_text_bodies_hold_no_slot(hostile_daemon, client) -> None:
    """Streams waiting for text take no synthesis slot (2 here): others are served; the
    waiting ones are bounded per frontend (3 here), so HTTP's cannot shut out Wyoming."""
    port = hostile_daemon.http_port
    tricklers = [_text_body(port) for _ in range(3)]
    try:
        for sock in tricklers:
            _piece(sock, b"T")
        time.sleep(0.3)
        speech = client.post("/v1/audio/speech", json={"input": SENTENCE, "response_format": "pcm"})
        assert speech.status_code == 200 and len(speech.content) > 22050
        one_shot = _wyoming(hostile_daemon.wyoming_port, [Synthesize(text="Okay.").event()])
        assert [e.type for e in one_shot][-1] == "audio-stop"
        fourth = _read_all(_text_body(port))
        assert _status(fourth) == 429 and _json_body(fourth)["error"]["code"] == "busy"
        session = _wyoming(
            hostile_daemon.wyoming_port,
            [
                SynthesizeStart().event(),
                SynthesizeChunk(text="The porch light is on.").event(),
                SynthesizeStop().event(),
            ],
        )
        assert "error" not in [e.type for e in session] and "audio-chunk" in {
            e.type for e in session
        }
    finally:
        for sock in tricklers:
            sock.close()


def test_stop_reaches_only_the_speaker(hostile_daemon, client, broker) -> None:
    """/v1/stop and an MQTT stop, to all or by id, never end a client's stream."""
    whole = client.post("/tts", json={"text": SENTENCE * 3, "response_format": "pcm"}).content
    with client.stream(
        "POST", "/tts/stream", json={"text": SENTENCE * 3, "response_format": "pcm"}
    ) as response:
        chunks = response.iter_raw()
        data = next(chunks)
        assert client.post("/v1/stop", json={}).json() == {"stopped": 0}
        publish(broker.port, f"{hostile_daemon.base}/stop", "")
        data += b"".join(chunks)  # httpx raises if it was cut short
    assert len(data) == len(whole)  # all of it (the voice is seeded: the same audio)

    async def stopped_by_others() -> list:
        async with AsyncTcpClient("127.0.0.1", hostile_daemon.wyoming_port) as wy:
            await wy.write_event(Synthesize(text=SENTENCE * 3).event())
            seen = [await wy.read_event()]
            client.post("/v1/stop", json={})
            publish(broker.port, f"{hostile_daemon.base}/stop", "")
            while seen[-1].type != "audio-stop":
                seen.append(await asyncio.wait_for(wy.read_event(), 60))
            return seen

    seen = asyncio.run(stopped_by_others())
    assert "error" not in [e.type for e in seen]
    pcm = b"".join(e.payload or b"" for e in seen if e.type == "audio-chunk")
    assert len(pcm) == len(whole)


def test_ids_cannot_be_guessed_or_squatted(hostile_daemon, client, broker) -> None:
    """Ids the daemon makes are random; a client's own id lives in its frontend's
    namespace, so an HTTP client cannot block (or stop) an MQTT client's id."""
    ids = [client.post("/v1/say", json={"text": "Okay."}).json()["id"] for _ in range(2)]
    assert all(re.fullmatch(r"http-say-[0-9a-f]{16}", i) for i in ids) and ids[0] != ids[1]
    base = hostile_daemon.base
    probe = Probe(broker.port, [f"{base}/events"])
    try:
        publish(broker.port, f"{base}/say", json.dumps({"id": "kitchen", "text": LONG}))
        probe.wait(f"{base}/events", lambda e: e["id"] == "kitchen" and e["event"] == "queued")
        squat = client.post("/v1/say", json={"id": "kitchen", "text": "Hello."})
        assert squat.status_code == 202, squat.text  # HTTP's own "kitchen", queued behind

        def kitchen(source: str, event: str):
            return lambda e: (e["id"], e["source"], e["event"]) == ("kitchen", source, event)

        assert client.post("/v1/stop", json={"id": "kitchen"}).json() == {"stopped": 1}
        probe.wait(f"{base}/events", kitchen("http-say", "stopped"))
        assert not probe.find(f"{base}/events", kitchen("say", "stopped"))  # not MQTT's
        publish(broker.port, f"{base}/stop", json.dumps({"id": "kitchen"}))
        probe.wait(f"{base}/events", kitchen("say", "stopped"))
    finally:
        client.post("/v1/stop", json={})
        probe.close()


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (b"Hello there, \xff\xfe my friend.", 400, "bad-text"),
        (b"Read this <note pin='4821'>now</note>.", 400, "bad-text"),
        (b"Ring the bell \x07 twice.", 400, "bad-text"),
        (b"word " * 1100, 413, "too-long"),  # one piece of 5,500 characters (limit 5,000)
    ],
)
def test_a_bad_first_piece_of_a_text_body_is_an_error(hostile_daemon, data, status, code):
    sock = _text_body(hostile_daemon.http_port)
    with sock:
        _piece(sock, data)
        received = _read_all(sock)
    assert _status(received) == status and _json_body(received)["error"]["code"] == code


@pytest.mark.parametrize("bad", [b"And \x07 then.", b"<b>Loud</b>", b"x" * 5100, b"\xc3\x28"])
def test_a_bad_later_piece_cuts_the_answer_and_says_so(hostile_daemon, client, bad) -> None:
    """After audio went out: the stream ends without its last chunk; a whole file is an
    error status. Never a clean end with the rest silently dropped."""
    port = hostile_daemon.http_port
    with _text_body(port) as sock:
        _piece(sock, b"The front door is now locked. The porch light is on. ")
        received = sock.recv(65536)
        while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < 64:
            received += sock.recv(65536)  # audio has begun
        _piece(sock, bad)
        received = _read_all(sock, received)
    assert _status(received) == 200 and not received.endswith(TERMINATOR)
    with _text_body(port, "/tts?response_format=wav") as sock:
        _piece(sock, b"The front door is now locked. ")
        time.sleep(0.5)
        _piece(sock, bad)
        received = _read_all(sock)
    assert _status(received) in (400, 413), received[:300]
    assert client.post("/tts", json={"text": "Okay."}).status_code == 200


def test_a_whole_file_over_the_limit_is_413(client) -> None:
    """A whole file is buffered (its length comes first): bounded (150 s here)."""
    reply = client.post("/tts", json={"text": LONG})
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "too-long"
    streamed = client.post("/tts", json={"text": LONG[:300], "stream": True})
    assert streamed.status_code == 200


def test_a_steady_slow_reader_is_not_cut_off(hostile_daemon, client) -> None:
    """Stall is judged by progress: 1 KiB every 0.1 s (a quarter of real time, in big
    chunks of audio) is progress for 8 s; the stall limit is 3 s here."""
    stopped = _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}')
    body = json.dumps({"input": LONG[:200], "response_format": "pcm"}).encode()
    with _raw(hostile_daemon.http_port, "/v1/audio/speech", body) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        received = b""
        until = time.monotonic() + 8
        while time.monotonic() < until:
            received += sock.recv(1024)
            time.sleep(0.1)
        received = _read_all(sock, received)
    assert received.endswith(TERMINATOR)  # all of it
    after = _metric(client, 'magpie_utterances_total{frontend="http",outcome="stopped"}')
    assert after == stopped


def test_sigterm_mid_answer_never_looks_complete(tmp_path, broker, prepared_state) -> None:
    """A plain audio stream cut by shutdown ends without its terminating chunk; a
    whole-file request answers 503."""
    port = free_port()
    proc = make_daemon(
        tmp_path, broker.port, prepared_state, http__enabled="true", http__port=str(port)
    ).start()
    url = f"http://127.0.0.1:{port}"
    outcome: dict[str, object] = {}

    def stream() -> None:
        try:
            speech = {"input": LONG}
            with httpx.stream("POST", f"{url}/v1/audio/speech", json=speech, timeout=60) as reply:
                for _ in reply.iter_raw():
                    outcome.setdefault("streaming", True)
            outcome["stream"] = "complete"
        except httpx.HTTPError as exc:
            outcome["stream"] = type(exc).__name__

    def whole() -> None:
        reply = httpx.post(f"{url}/tts", json={"text": LONG}, timeout=60)
        outcome["whole"] = (reply.status_code, reply.json()["error"]["code"])

    threads = [threading.Thread(target=stream), threading.Thread(target=whole)]
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=url) as client:
            _wait_metric(client, "magpie_active_streams", lambda v: v == 2, 20)
        while "streaming" not in outcome:
            time.sleep(0.05)
        proc.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
    finally:
        proc.stop()
    assert outcome["stream"] == "RemoteProtocolError"  # incomplete chunked read
    assert outcome["whole"] == (503, "shutting-down")


def test_one_frontend_cannot_use_up_anothers_rate_budget(hostile_daemon, client, broker):
    """(Last here: it spends HTTP's budget, 60 a minute.) MQTT and Wyoming keep theirs."""
    for _ in range(70):
        reply = client.post("/v1/audio/speech", json={"input": "Okay.", "response_format": "pcm"})
        if reply.status_code == 429:
            break
    assert reply.status_code == 429 and "rate limit" in reply.json()["error"]["message"]
    probe = Probe(broker.port, [f"{hostile_daemon.base}/events"])
    try:
        publish(broker.port, f"{hostile_daemon.base}/say", '{"id": "timer", "text": "Timer done."}')
        probe.wait(
            f"{hostile_daemon.base}/events",
            lambda e: e["id"] == "timer" and e["event"] == "finished",
        )
    finally:
        probe.close()
    spoken = _wyoming(hostile_daemon.wyoming_port, [Synthesize(text="Okay.").event()])
    assert [e.type for e in spoken][-1] == "audio-stop"
