"""Voices by name only, end to end on every frontend with its real client (httpx, the
`wyoming` package's client, mosquitto_pub): every spelling of a path, a system file, a
missing file, a folder, a file that is not a voice and a voice that does not load get the
same `unknown-voice` answer, load nothing and leave no path in the log; a voice in
`engine.voices_dir` loads by name once; the catalogue lists exactly the usable names."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from magpie_tts.engine.voice import default_model_path
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeStart, SynthesizeVoice

from ...conftest import tiny_voice
from ...harness import free_port, make_daemon

DEFAULT = "en_US-joe-medium"


@pytest.fixture(scope="module")
def voices_daemon(tmp_path_factory, broker, prepared_state):
    """HTTP, Wyoming and MQTT on; voices_dir with one more real voice (`second`, a copy of
    the default's files), one that does not load (`broken`) and things that are no voice."""
    folder = tmp_path_factory.mktemp("voices")
    voices = folder / "voices"
    voices.mkdir()
    model = default_model_path()
    shutil.copy(model, voices / "second.onnx")
    shutil.copy(model.with_name(model.name + ".json"), voices / "second.onnx.json")
    tiny_voice(voices / "broken.onnx")
    (voices / "notavoice.onnx").write_bytes(os.urandom(4096))
    (voices / "garbage.onnx").write_bytes(os.urandom(4096))
    shutil.copy(model.with_name(model.name + ".json"), voices / "garbage.onnx.json")
    tiny_voice(voices / "other.onnx", inputs=("x",))
    (voices / "adir.onnx").mkdir()
    (folder / "link.onnx").symlink_to(model)
    http_port, wyoming_port = free_port(), free_port()
    proc = make_daemon(
        folder,
        broker.port,
        prepared_state,
        http__enabled="true",
        http__port=str(http_port),
        http__rate_per_minute="10000",
        limits__rate_per_minute="10000",
        wyoming__enabled="true",
        wyoming__port=str(wyoming_port),
        engine__voices_dir=str(voices),
    ).start()
    proc.url = f"http://127.0.0.1:{http_port}"
    proc.wyoming_port = wyoming_port
    proc.voices = voices
    yield proc
    proc.stop()


def not_voices(daemon) -> list[str]:
    """Every `voice` here names no voice a request can use."""
    model = default_model_path()
    data, voices = model.parent, daemon.voices
    return [
        str(model),
        f"{data}/./{model.name}",
        f"{data}/../{data.name}/{model.name}",
        f"{data}//{model.name}",
        f"/{data}/{model.name}",
        str(daemon.folder / "link.onnx"),
        "/etc/shadow",
        "/etc/passwd",
        "/nonexistent/voice.onnx",
        str(voices),
        str(voices / "adir.onnx"),
        str(voices / "second.onnx"),  # a real voice, but by path
        str(voices / "notavoice.onnx"),
        "../voices/second",
        "../../../../etc/passwd",
        "..",
        "notavoice",
        "garbage",
        "other",
        "adir",
        "second.onnx",
        "no-such-voice",
    ]


def paths(names: list[str]) -> list[str]:
    return [n for n in names if "/" in n or n.startswith(".")]


def loaded_voices(client: httpx.Client) -> int:
    found = re.search(r"^magpie_voices_loaded (\S+)$", client.get("/metrics").text, re.M)
    assert found is not None
    return int(float(found.group(1)))


def rss_mb(daemon) -> float:
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def assert_no_path_logged(daemon) -> None:
    log = daemon.log()
    model = default_model_path()
    for secret in ("/etc/shadow", "/etc/passwd", "/nonexistent", f"{model.parent}/./"):
        assert secret not in log
    assert f"{model.parent}//" not in log and "/../" not in log


def speak(client: httpx.Client, voice: str | None = None) -> httpx.Response:
    body = {"input": "Okay.", "response_format": "pcm", **({"voice": voice} if voice else {})}
    return client.post("/v1/audio/speech", json=body)


def test_http_every_unusable_voice_gets_one_answer_and_loads_nothing(voices_daemon) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        before, rss_before = loaded_voices(client), rss_mb(voices_daemon)
        bodies: dict[str, set[str]] = {}
        for name in not_voices(voices_daemon):
            replies = [
                client.post("/v1/audio/speech", json={"input": "Okay.", "voice": name}),
                client.post("/tts", json={"text": "Okay.", "voice": name}),
                client.post(
                    "/tts/stream",
                    params={"voice": name},
                    content=b"Okay.",
                    headers={"Content-Type": "text/plain"},
                ),
                client.post("/v1/say", json={"text": "Okay.", "voice": name, "wait": True}),
            ]
            for reply in replies:
                assert reply.status_code == 400, (name, reply.text)
                assert reply.json()["error"]["code"] == "unknown-voice", (name, reply.text)
            bodies[name] = {reply.json()["error"]["message"] for reply in replies}
            assert speak(client).status_code == 200  # the daemon serves on
        assert len({m for n in paths(list(bodies)) for m in bodies[n]}) == 1  # one answer
        for name in ("notavoice", "adir", "no-such-voice"):  # whatever is on disk
            assert bodies[name] == {f"unknown voice {name!r}"}
        assert loaded_voices(client) == before
        assert rss_mb(voices_daemon) - rss_before < 40  # a voice's copy is ~80 MB
    assert_no_path_logged(voices_daemon)


async def _wyoming(port: int, events: list[Event]) -> list[Event]:
    """Each event, then what it got: up to its `error` or `audio-stop`."""
    answers = []
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
            while True:
                got = await asyncio.wait_for(client.read_event(), 60)
                assert got is not None
                if got.type in ("error", "audio-stop"):
                    answers.append(got)
                    break
    return answers


def test_wyoming_every_unusable_voice_gets_one_answer(voices_daemon) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        before = loaded_voices(client)
        texts: dict[str, set[str]] = {}
        for name in not_voices(voices_daemon):
            voice = SynthesizeVoice(name=name)
            events = [
                Synthesize(text="Okay.", voice=voice).event(),
                Synthesize(text="Okay.").event(),  # served after it
                SynthesizeStart(voice=voice).event(),
            ]
            refused, served, refused_stream = asyncio.run(
                _wyoming(voices_daemon.wyoming_port, events)
            )
            assert served.type == "audio-stop", name
            for answer in (refused, refused_stream):
                assert answer.type == "error" and answer.data["code"] == "unknown-voice", name
            texts[name] = {refused.data["text"], refused_stream.data["text"]}
        assert len({t for n in paths(list(texts)) for t in texts[n]}) == 1
        assert texts["notavoice"] == {"unknown voice 'notavoice'"}
        assert loaded_voices(client) == before
    assert_no_path_logged(voices_daemon)


def test_mqtt_every_unusable_voice_gets_one_answer(voices_daemon, probe) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        before = loaded_voices(client)
    names = not_voices(voices_daemon)
    for index, name in enumerate(names):
        voices_daemon.say(json.dumps({"text": "Okay.", "id": f"v{index}", "voice": name}))
    voices_daemon.say(json.dumps({"text": "Okay.", "id": "fine"}))
    topic = f"{voices_daemon.base}/error"
    errors = probe.wait(topic, lambda e: str(e.get("id", "")).startswith("v"), count=len(names))
    assert all("unknown voice" in e["error"] for e in errors)
    by_path = {e["error"] for e in errors if names[int(e["id"][1:])] in paths(names)}
    assert len(by_path) == 1
    probe.wait(
        f"{voices_daemon.base}/events", lambda e: e["id"] == "fine" and e["event"] == "finished"
    )
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        assert loaded_voices(client) == before
    assert_no_path_logged(voices_daemon)


def test_a_voice_that_does_not_load_gets_the_same_answer_then_goes(voices_daemon) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        names = [v["name"] for v in client.get("/v1/audio/voices").json()["voices"]]
        assert "broken" in names  # a Piper graph and config, but no vocoder in it
        for _ in range(2):  # loading it fails; then it is refused before queueing
            reply = client.post("/tts", json={"text": "Okay.", "voice": "broken"})
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"] == {
                "message": "unknown voice 'broken'",
                "type": "invalid_request_error",
                "code": "unknown-voice",
            }
        answers = asyncio.run(
            _wyoming(
                voices_daemon.wyoming_port,
                [Synthesize(text="Okay.", voice=SynthesizeVoice(name="broken")).event()],
            )
        )
        assert answers[0].data == {"text": "unknown voice 'broken'", "code": "unknown-voice"}
        assert loaded_voices(client) == 1 and speak(client).status_code == 200


def test_the_catalogue_lists_exactly_the_usable_names(voices_daemon) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=60) as client:
        client.post("/tts", json={"text": "Okay.", "voice": "broken"})  # gone once tried
        catalogue = client.get("/v1/audio/voices").json()
        listed = [v["name"] for v in catalogue["voices"]]
        assert listed == [DEFAULT, "second"] and "default" in catalogue["aliases"]

        async def describe() -> Info:
            async with AsyncTcpClient("127.0.0.1", voices_daemon.wyoming_port) as wyoming:
                await wyoming.write_event(Describe().event())
                return Info.from_event(await asyncio.wait_for(wyoming.read_event(), 30))

        info = asyncio.run(describe())
        assert [v.name for v in info.tts[0].voices] == listed
        for name in [*listed, "default"]:
            assert speak(client, name).status_code == 200, name


def test_a_voice_in_voices_dir_loads_by_name_once(voices_daemon) -> None:
    with httpx.Client(base_url=voices_daemon.url, timeout=120) as client:
        for _ in range(2):
            assert speak(client, "second").status_code == 200
        assert loaded_voices(client) == 2  # the default and `second`
        assert voices_daemon.log().count("loading voice second") == 1
        started = time.monotonic()
        assert speak(client).status_code == 200 and time.monotonic() - started < 30
