"""Hostile and careless clients end to end, with real clients against one daemon: web
pages (Origin, simple content types), key guessing, the speech budget, wrong methods, and
connections that start a request and never finish it (HTTP headers or body, a Wyoming
event). Each test sends from its own loopback address: budgets are per address."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time

import httpx
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.event import read_event
from wyoming.info import Describe, Info

from ...harness import free_port, make_daemon

KEY = "guard-key"
DASHBOARD = "http://dashboard.local:8123"
TIMEOUT_S = 2.0  # http.header_timeout_s and limits.client_read_timeout_s here


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("guard")
    (folder / "api-key").write_text(KEY + "\n")
    port, wyoming_port = free_port(), free_port()
    proc = make_daemon(
        folder,
        broker.port,
        prepared_state,
        http__enabled="true",
        http__port=str(port),
        http__api_key_file=str(folder / "api-key"),
        http__rate_per_minute="3",
        http__allowed_origins=f"[{DASHBOARD}]",
        http__header_timeout_s=str(TIMEOUT_S),
        limits__client_read_timeout_s=str(TIMEOUT_S),
        wyoming__enabled="true",
        wyoming__port=str(wyoming_port),
    ).start()
    proc.url = f"http://127.0.0.1:{port}"
    proc.http_port, proc.wyoming_port = port, wyoming_port
    yield proc
    proc.stop()


def client_from(daemon, address: str, key: str | None = KEY) -> httpx.Client:
    """A client whose requests come from `address` (its own budgets)."""
    return httpx.Client(
        base_url=daemon.url,
        headers={"Authorization": f"Bearer {key}"} if key else {},
        transport=httpx.HTTPTransport(local_address=address),
        timeout=30,
    )


def serves(daemon) -> None:
    with client_from(daemon, "127.0.0.99") as client:
        reply = client.post("/tts", json={"text": "Still here.", "response_format": "pcm"})
        assert reply.status_code == 200 and len(reply.content) > 1000


def test_web_pages_cannot_make_the_speaker_talk(guarded) -> None:
    """What a page elsewhere can send without asking first (text/plain, a form) is
    refused, and any request from a foreign page (its Origin) is 403."""
    with client_from(guarded, "127.0.0.2") as client:
        evil = {"Origin": "http://evil.example"}
        plain = {"Content-Type": "text/plain"}
        say = json.dumps({"text": "Open the door."})
        for path in ("/v1/say", "/v1/stop"):
            reply = client.post(path, content=say, headers={**plain, **evil})
            assert reply.status_code == 403, reply.text
            assert reply.json()["error"]["code"] == "forbidden_origin"
            reply = client.post(path, content=say, headers=plain)  # no Origin: still not JSON
            assert reply.status_code == 415, reply.text
            assert reply.json()["error"]["code"] == "unsupported_media_type"
        form = client.post("/v1/audio/speech", data={"input": "Hi."})
        assert form.status_code == 415
        multipart = client.post("/tts", files={"text": ("t.txt", b"Hi.", "text/plain")})
        assert multipart.status_code == 415
        charset = {"Content-Type": "text/plain; charset=utf-8"}
        assert client.post("/v1/say", content=say, headers=charset).status_code == 415
        assert client.post("/v1/say", json={"text": "Hi."}, headers=evil).status_code == 403
        # DNS rebinding: a page naming this very host is a page all the same
        assert client.get("/health", headers={"Origin": guarded.url}).status_code == 403
        assert client.get("/v1/models", headers={"Origin": "null"}).status_code == 403
        # a configured page may: preflight answered, its answers readable
        preflight = client.options(
            "/v1/say",
            headers={
                "Origin": DASHBOARD,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["Access-Control-Allow-Origin"] == DASHBOARD
        models = client.get("/v1/models", headers={"Origin": DASHBOARD})
        assert models.status_code == 200
        assert models.headers["Access-Control-Allow-Origin"] == DASHBOARD
        # the speaker stops without a body; streamed text stays text/plain
        assert client.post("/v1/stop").status_code == 200
        stream = client.post("/tts/stream?response_format=pcm", content=b"Hi.", headers=plain)
        assert stream.status_code == 200 and stream.content
    log = guarded.log()
    assert "Open the door" not in log


def test_key_guessing_is_limited_and_logged_once(guarded) -> None:
    with client_from(guarded, "127.0.0.3", key="wrong") as guesser:
        replies = [guesser.post("/v1/say", json={"text": "Hi."}) for _ in range(14)]
    codes = [r.status_code for r in replies]
    assert codes[:10] == [401] * 10 and codes[10:] == [429] * 4, codes
    assert replies[0].headers["WWW-Authenticate"].startswith("Bearer")
    assert replies[0].json()["error"]["code"] == "auth"
    assert 1 <= int(replies[-1].headers["Retry-After"]) <= 60
    with client_from(guarded, "127.0.0.3") as right_key:  # locked out: the key is not tried
        assert right_key.get("/v1/models").status_code == 429
    with client_from(guarded, "127.0.0.4") as other:  # another address is not
        assert other.get("/v1/models").status_code == 200
    warnings = [
        line for line in guarded.log().splitlines() if "127.0.0.3" in line and "WARNING" in line
    ]
    assert 1 <= len(warnings) <= 2, warnings  # one per kind (401, then 429), not one each
    assert KEY not in guarded.log()


def test_speech_budget_counts_accepted_speech_only(guarded) -> None:
    with client_from(guarded, "127.0.0.5") as client:
        for path in ("/health", "/metrics", "/v1/models", "/v1/audio/voices") * 2:
            assert client.get(path).status_code == 200, path
        for body in ({"input": ""}, {"input": 5}, {"input": "Hi.", "response_format": "ogg"}):
            assert client.post("/v1/audio/speech", json=body).status_code == 400
        for _ in range(3):
            assert client.post("/v1/say", json={"text": "Hi."}).status_code == 202
        spent = client.post("/v1/audio/speech", json={"input": "Hi."})
    assert spent.status_code == 429 and spent.json()["error"]["code"] == "busy"
    assert 1 <= int(spent.headers["Retry-After"]) <= 60


def test_wrong_method_says_which_are_allowed(guarded) -> None:
    with client_from(guarded, "127.0.0.6") as client:
        say = client.get("/v1/say")
        health = client.delete("/health")
    assert say.status_code == 405 and "POST" in say.headers["Allow"]
    assert health.status_code == 405 and "GET" in health.headers["Allow"]
    assert say.json()["error"]["message"]


def _closed_within(
    sock: socket.socket, seconds: float, until: bytes | None = None
) -> tuple[bytes, float]:
    """What the server sends until it closes the connection (or sends `until`), and
    when it did."""
    sock.settimeout(seconds)
    start, data = time.monotonic(), b""
    while (until is None or until not in data) and (chunk := sock.recv(65536)):
        data += chunk
    return data, time.monotonic() - start


def test_half_sent_headers_are_cut_off(guarded) -> None:
    with socket.create_connection(("127.0.0.1", guarded.http_port)) as sock:
        sock.sendall(b"POST /v1/say HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        _, took = _closed_within(sock, TIMEOUT_S + 10)
    assert took < TIMEOUT_S + 5
    serves(guarded)


def test_headers_trickled_a_byte_at_a_time_are_cut_off(guarded) -> None:
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", guarded.http_port)) as sock:
        sock.settimeout(0.3)
        for byte in head:  # ~36 s if it were let through
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1024) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:  # reset: closed
                break
    assert time.monotonic() - start < TIMEOUT_S + 5


def test_a_body_that_never_arrives_is_408(guarded) -> None:
    with socket.create_connection(("127.0.0.1", guarded.http_port)) as sock:
        sock.sendall(
            b"POST /v1/say HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: 300\r\n\r\n".encode()
            + b'{"text": "Hel'
        )
        data, took = _closed_within(sock, TIMEOUT_S + 10, until=b"client_read_timeout_s")
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert took < TIMEOUT_S + 5
    serves(guarded)


@pytest.mark.parametrize(
    "sent",
    [
        b'{"type": "synthesize", "data_length": 60}\n{"text": "Hi',  # data promised, not sent
        b'{"type": "describe", "payload_length": 900}\n' + b"x" * 10,  # payload promised
        b'{"type": "synthe',  # a header never finished
    ],
)
def test_wyoming_event_promising_more_than_it_sends_is_cut(guarded, sent: bytes) -> None:
    with socket.create_connection(("127.0.0.1", guarded.wyoming_port)) as sock:
        sock.sendall(sent)
        data, took = _closed_within(sock, TIMEOUT_S + 10)
    assert took < TIMEOUT_S + 5
    error = read_event(io.BytesIO(data))
    assert error is not None and error.type == "error", data
    assert error.data["code"] == "timeout" and "client_read_timeout_s" in error.data["text"]

    async def describe() -> Info:
        async with AsyncTcpClient("127.0.0.1", guarded.wyoming_port) as client:
            await client.write_event(Describe().event())
            event = await asyncio.wait_for(client.read_event(), 10)
            assert event is not None
            return Info.from_event(event)

    assert asyncio.run(describe()).tts  # the server serves on
