"""The HTTP frontend in-process (aiohttp's test client) on a Core with fakes: routes,
fields, errors, keys and limits in milliseconds. The end-to-end tests (test_http.py)
drive a real daemon with the openai SDK."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.frontends.http.server import HttpFrontend
from magpie_tts.engine import EngineError

from ...fakes import RATE, FakeHost, FakePlayer, FakeSynth, fake_core

Check = Callable[[TestClient, FakeHost], Awaitable[None]]


@pytest.fixture
def serve():
    """Run `check(client, host)` against an HttpFrontend on a fake host."""
    cores: list[Any] = []

    def run(check: Check, ready: bool = True, config: Config | None = None, **core: Any) -> Any:
        made = fake_core(**core)
        cores.append(made)
        host = FakeHost(made, ready=ready)
        frontend = HttpFrontend(config or Config(), host)

        async def go() -> None:
            async with TestClient(TestServer(frontend.application())) as client:
                await check(client, host)

        asyncio.run(go())
        return host

    yield run
    for core in cores:
        core.shutdown()


def test_loading_answers_503_on_every_route(serve) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        health = await client.get("/health")
        assert health.status == 503 and (await health.json()) == {"state": "loading"}
        for method, path in (("post", "/v1/audio/speech"), ("get", "/metrics"), ("post", "/tts")):
            response = await client.request(method, path, json={"input": "Hi.", "text": "Hi."})
            body = await response.json()
            assert response.status == 503 and body["error"]["code"] == "loading", path

    serve(check, ready=False)


def test_speech_is_a_wav_of_every_unit(serve) -> None:
    synth = FakeSynth()

    async def check(client: TestClient, _host: FakeHost) -> None:
        response = await client.post(
            "/v1/audio/speech", json={"input": "One two. Three four.", "response_format": "wav"}
        )
        assert response.status == 200 and response.content_type == "audio/wav"
        data = await response.read()
        assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
        assert struct.unpack("<I", data[24:28])[0] == RATE
        assert len(data) - 44 == 2 * 50 * 2  # two units, 50 samples each, 16 bit

    serve(check, synth=synth)
    assert synth.spoken == ["One two.", "Three four."]


def test_pcm_stream_of_streamed_text(serve) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        response = await client.post(
            "/tts/stream?response_format=pcm",
            data=b"First part. Second part.",
            headers={"Content-Type": "text/plain"},
        )
        assert response.status == 200
        assert len(await response.read()) == 2 * 50 * 2

    serve(check)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "bad_json"),
        (b"\xff\xfe", 400, "bad_json"),
        (b"[1, 2]", 400, "bad_json"),
        (b'{"input": 5}', 400, None),
        (b'{"input": "Hi.", "speed": NaN}', 400, "bad_json"),
        (b'{"input": "Hi.", "speed": 9}', 400, None),
        (b'{"input": ""}', 400, "empty-text"),
        (b'{"input": "Hi.", "voice": "nobody"}', 400, "unknown-voice"),
        (b'{"input": "Hi.", "response_format": "ogg"}', 400, None),
    ],
)
def test_bad_requests_get_a_clear_error_and_the_server_serves_on(
    serve, body: bytes, status: int, code: str | None
) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        response = await client.post(
            "/v1/audio/speech", data=body, headers={"Content-Type": "application/json"}
        )
        error = (await response.json())["error"]
        assert response.status == status and error["message"]
        if code is not None:
            assert error["code"] == code
        again = await client.post("/v1/audio/speech", json={"input": "Still here."})
        assert again.status == 200

    serve(check)


def test_api_key_is_asked_for(serve, tmp_path) -> None:
    key = tmp_path / "key"
    key.write_text("sesame\n")
    config = Config.model_validate({"http": {"api_key_file": str(key)}})

    async def check(client: TestClient, _host: FakeHost) -> None:
        missing = await client.post("/v1/audio/speech", json={"input": "Hi."})
        wrong = await client.post(
            "/v1/audio/speech", json={"input": "Hi."}, headers={"Authorization": "Bearer nope"}
        )
        right = await client.post(
            "/v1/audio/speech", json={"input": "Hi."}, headers={"Authorization": "Bearer sesame"}
        )
        assert (missing.status, wrong.status, right.status) == (401, 401, 200)
        assert (await client.get("/health")).status == 200  # health needs no key

    serve(check, config=config)


def test_per_client_rate_counts_accepted_speech_only(serve) -> None:
    config = Config.model_validate({"http": {"rate_per_minute": 2}})

    async def check(client: TestClient, _host: FakeHost) -> None:
        for path in ("/v1/models", "/v1/audio/voices", "/health", "/metrics") * 2:
            assert (await client.get(path)).status == 200, path
        for body in ({"input": 5}, {"input": "Hi.", "speed": 9}, {"input": "Hi.", "voice": "x"}):
            assert (await client.post("/v1/audio/speech", json=body)).status == 400
        say = await client.post("/v1/say", json={"text": "Hi.", "cache": "yes"})
        assert say.status == 400
        for _ in range(2):
            assert (await client.post("/v1/say", json={"text": "Hi."})).status == 202
        spent = await client.post("/v1/audio/speech", json={"input": "Hi."})
        assert spent.status == 429 and (await spent.json())["error"]["code"] == "busy"
        assert 1 <= int(spent.headers["Retry-After"]) <= 60
        assert (await client.get("/v1/models")).status == 200  # information stays open

    serve(check, config=config)


def test_the_cores_rate_limit_says_when_to_retry(serve) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        assert (await client.post("/v1/say", json={"text": "Hi."})).status == 202
        spent = await client.post("/v1/say", json={"text": "Again."})
        assert spent.status == 429 and 55 <= int(spent.headers["Retry-After"]) <= 60

    serve(check, rate_per_minute=1)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/say", {"text": "Hi.", "id": "x" * 129}, '"id"'),
        ("/v1/say", {"text": "Hi.", "id": ""}, '"id"'),
        ("/v1/say", {"text": "Hi.", "cache": "yes"}, '"cache"'),
        ("/v1/say", {"text": "Hi.", "cache": 1}, '"cache"'),
        ("/v1/say", {"text": "Hi.", "wait": "yes"}, '"wait"'),
        ("/tts", {"text": "Hi.", "stream": "true"}, '"stream"'),
        ("/tts", {"text": "Hi.", "speaker_id": None, "speaker": 5}, "speaker"),
        ("/tts", {"text": "Hi.", "speaker_id": 1.5}, '"speaker_id"'),
    ],
)
def test_wrong_field_values_are_refused_naming_the_field(serve, path, body, field) -> None:
    """A value of the wrong type or out of range is a 400 that names the field, never
    cut, coerced or ignored; nothing is queued for it."""
    player = FakePlayer()

    async def check(client: TestClient, _host: FakeHost) -> None:
        reply = await client.post(path, json=body)
        error = (await reply.json())["error"]
        assert reply.status == 400 and field in error["message"], error
        assert (await client.post("/v1/say", json={"text": "Still here.", "wait": True})).ok

    serve(check, player=player)
    assert len(player.played) == 1  # only the last request was spoken


def test_an_id_of_128_characters_is_kept_whole(serve) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        reply = await client.post("/v1/say", json={"text": "Hi.", "id": "x" * 128})
        assert reply.status == 202 and (await reply.json())["id"] == "x" * 128

    serve(check)


def test_too_many_streams_is_429(serve) -> None:
    async def check(client: TestClient, _host: FakeHost) -> None:
        first = asyncio.ensure_future(client.post("/v1/audio/speech", json={"input": "A. B. C."}))
        await asyncio.sleep(0.05)  # the first holds the only stream slot
        second = await client.post("/v1/audio/speech", json={"input": "Hi."})
        assert second.status == 429 and (await second.json())["error"]["code"] == "busy"
        assert second.headers["Retry-After"] == "1"  # when a stream ends is not known
        assert (await first).status == 200

    serve(check, synth=FakeSynth(unit_delay=0.1), max_streams=1)


def test_say_queues_on_the_speaker_and_stop_by_unknown_id_is_404(serve) -> None:
    player = FakePlayer()

    async def check(client: TestClient, _host: FakeHost) -> None:
        queued = await client.post("/v1/say", json={"text": "Hello.", "id": "s1"})
        assert queued.status == 202 and (await queued.json()) == {"id": "s1", "event": "queued"}
        waited = await client.post("/v1/say", json={"text": "Again.", "wait": True})
        assert waited.status == 200 and (await waited.json())["event"] == "finished"
        unknown = await client.post("/v1/stop", json={"id": "nobody"})
        assert unknown.status == 404 and (await unknown.json())["error"]["code"] == "unknown_id"
        bad = await client.post("/v1/say", json={"text": "Hi.", "volume": 3})
        assert bad.status == 400

    serve(check, player=player)
    assert len(player.played) == 2


def test_health_voices_and_metrics_come_from_the_host(serve) -> None:
    async def check(client: TestClient, host: FakeHost) -> None:
        health = await client.get("/health")
        assert health.status == 200
        assert (await health.json())["version"] == host.version
        voices = (await (await client.get("/v1/audio/voices")).json())["voices"]
        assert voices[0]["name"] == "fake" and voices[0]["speakers"] == ["alice"]
        metrics = await client.get("/metrics")
        assert (await metrics.read()) == host.metrics_text()
        host.health = "degraded"
        degraded = await client.get("/health")
        assert degraded.status == 503 and (await degraded.json())["state"] == "degraded"

    serve(check)


class FailingSynth(FakeSynth):
    """Fails after its first chunk, as a broken decoder would, half way."""

    def stream_clauses(self, units, *args: Any, **kwargs: Any):
        for index, chunk in enumerate(super().stream_clauses(units, *args, **kwargs)):
            if index == 1:
                raise EngineError("decoder failed")
            yield chunk


def test_audio_cut_short_never_looks_complete(serve) -> None:
    """A plain stream ends without its last chunk, SSE says so, a whole file is 500."""

    async def check(client: TestClient, _host: FakeHost) -> None:
        text = {"input": "One two. Three four. Five six.", "response_format": "pcm"}
        plain = await client.post("/v1/audio/speech", json=text)
        assert plain.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await plain.read()
        sse = await client.post("/v1/audio/speech", json={**text, "stream_format": "sse"})
        done = (await sse.text()).strip().splitlines()[-1]
        assert '"speech.audio.done"' in done and "decoder failed" in done
        whole = await client.post("/tts", json={"text": text["input"]})
        assert whole.status == 500 and "decoder failed" in (await whole.json())["error"]["message"]

    serve(check, synth=FailingSynth())


def test_a_text_body_that_stops_before_its_end_is_cut_short(serve) -> None:
    """Audio began, then the text stopped coming: at the idle limit the answer ends
    without its terminating chunk, never as if all had been said."""

    async def check(client: TestClient, _host: FakeHost) -> None:
        never = asyncio.Event()

        async def body():
            yield b"First part. Second "
            await never.wait()  # the rest of the text never comes

        response = await client.post(
            "/tts/stream?response_format=pcm",
            data=body(),
            headers={"Content-Type": "text/plain"},
        )
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
        never.set()

    serve(check, stream_idle_s=0.5)
