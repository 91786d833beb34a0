"""SSML over HTTP, end to end in-process: the official openai SDK against the HTTP
frontend on a core with the real voice. A break is heard as a pause where it stands;
malformed, external-entity and entity-bomb documents get a 400 and the server goes on."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.frontends.http.server import HttpFrontend

from ...engine.test_ssml import BOMB, _longest_quiet_s
from ...fakes import FakeHost, fake_core

SENTENCE = "Turn on the kitchen lights and the hallway too."
BROKEN = "<speak>Turn on the kitchen lights <break time='900ms'/> and the hallway too.</speak>"
HOSTILE = {
    "malformed": "<speak>Hello <break time='1s'></speak>",
    "external entity": '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>',
    "entity bomb": BOMB,
}


@pytest.fixture
def speak(synth):
    """Run `check(sdk)` with an AsyncOpenAI client on an in-process HTTP frontend."""
    from openai import AsyncOpenAI

    core = fake_core(synth=synth)

    def run(check: Any) -> Any:
        async def go() -> Any:
            frontend = HttpFrontend(Config(), FakeHost(core))
            async with TestServer(frontend.application()) as server:
                base = str(server.make_url("/v1"))
                sdk = AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
                return await check(sdk)

        return asyncio.run(go())

    yield run
    core.shutdown()


async def _pcm(sdk: Any, text: str) -> np.ndarray:
    reply = await sdk.audio.speech.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm"
    )
    return np.frombuffer(reply.read(), "<i2")


def test_ssml_over_the_openai_sdk(speak, synth) -> None:
    import openai

    async def check(sdk: Any) -> dict[str, Any]:
        found: dict[str, Any] = {"broken": await _pcm(sdk, BROKEN)}
        found["plain"] = await _pcm(sdk, SENTENCE)
        found["slow"] = await _pcm(sdk, f"<speak><prosody rate='50%'>{SENTENCE}</prosody></speak>")
        for name, document in HOSTILE.items():
            with pytest.raises(openai.BadRequestError) as refused:
                await _pcm(sdk, document)
            body = refused.value.body
            assert isinstance(body, dict) and body["code"] == "bad-ssml", body
            assert "passwd" not in body["message"] and "lol" not in body["message"], name
        found["after"] = await _pcm(sdk, "<speak>Still here.</speak>")  # serving on
        return found

    found = speak(check)
    rate = synth.voice.sample_rate
    assert 0.75 <= _longest_quiet_s(found["broken"], rate) <= 1.2
    assert 1.6 <= len(found["slow"]) / len(found["plain"]) <= 2.5
    assert len(found["after"]) > rate // 4


def test_word_timings_as_sse_events_and_captioned_json(speak) -> None:
    import base64
    import json

    text = '<speak>Turn on the lights. <break time="300ms"/>Then <mark name="m"/>lock up.</speak>'

    async def check(sdk: Any) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
        client = sdk._client  # the SDK's own httpx client, for the raw SSE lines
        base = str(sdk.base_url)
        events = []
        async with client.stream(
            "POST", f"{base}audio/speech", json={**body, "stream_format": "sse", "timestamps": True}
        ) as reply:
            async for line in reply.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        captioned = (await client.post(f"{base}audio/speech/captioned", json=body)).json()
        refused = await client.post(f"{base}audio/speech", json={**body, "timestamps": True})
        return events, captioned, refused.status_code

    events, captioned, refused = speak(check)
    kinds = [e["type"] for e in events]
    words = [e for e in events if e["type"] == "speech.word"]
    assert [w["word"] for w in words] == "Turn on the lights Then lock up".split()
    assert kinds.index("speech.word") < kinds.index("speech.audio.delta")  # before its audio
    assert [e["name"] for e in events if e["type"] == "speech.mark"] == ["m"]
    audio_s = sum(len(base64.b64decode(e["audio"])) for e in events if "audio" in e) / 2 / 22050
    assert all(0 <= w["start"] <= w["end"] <= audio_s for w in words)
    assert [w["word"] for w in captioned["words"]] == [w["word"] for w in words]
    assert captioned["marks"][0]["name"] == "m" and captioned["content_type"] == "audio/pcm"
    assert len(base64.b64decode(captioned["audio"])) / 2 / 22050 == pytest.approx(audio_s, 0.05)
    assert refused == 400  # timestamps need SSE or the captioned route
