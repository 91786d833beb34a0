"""The service's lifecycle in-process, with fake frontends and a fake voice registry:
which frontends start when, what a failed start leaves behind, how it shuts down."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest
from magpie_tts.daemon import service as service_module
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.frontends.base import Frontend
from magpie_tts.daemon.service import Service

from ..fakes import FakeRegistry, FakeSynth


class Registry(FakeRegistry):
    def __init__(self) -> None:
        super().__init__(FakeSynth())
        self.default_loaded = False

    def load(self) -> Any:
        self.default_loaded = True
        return self.synth

    def loaded(self) -> list[str]:
        return ["fake"] if self.default_loaded else []


def frontend(name: str, early: bool = False, fails: bool = False) -> type[Frontend]:
    class Fake(Frontend):
        answers_while_loading = early
        log: ClassVar[list[str]] = []

        def start(self) -> None:
            if fails:
                raise OSError(f"{name}: port in use")
            self.log.append(f"start {name}")

        def stop(self) -> None:
            self.log.append(f"stop {name}")
            if name == "broken-stop":
                raise RuntimeError("stop failed")

    Fake.name = name
    return Fake


@pytest.fixture
def log() -> list[str]:
    entries: list[str] = []
    return entries


def build(monkeypatch, log: list[str], *frontends: type[Frontend]) -> Service:
    for each in frontends:
        each.log = log  # type: ignore[attr-defined]
    monkeypatch.setattr(service_module, "FRONTENDS", frontends)
    config = Config.model_validate({"audio": {"device": "null"}})  # ALSA's null PCM
    return Service(config, registry=Registry())  # type: ignore[arg-type]


def test_early_frontends_open_before_the_voice_loads_the_rest_after(monkeypatch, log) -> None:
    service = build(monkeypatch, log, frontend("http", early=True), frontend("a"), frontend("b"))
    service.open()
    assert log == ["start http"] and not service.ready
    assert service.metrics_text()  # renders before the voice is loaded
    service.load()
    service.start()
    assert log == ["start http", "start a", "start b"] and service.ready
    service.shutdown()
    assert log[3:] == ["stop b", "stop a", "stop http"] and not service.ready
    service.shutdown()  # a second time does nothing
    assert len(log) == 6


def test_a_frontend_that_cannot_start_leaves_nothing_running(monkeypatch, log) -> None:
    service = build(
        monkeypatch, log, frontend("http", early=True), frontend("a"), frontend("b", fails=True)
    )
    service.open()
    service.load()
    with pytest.raises(OSError, match="port in use"):
        service.start()
    assert log == ["start http", "start a", "stop b", "stop a", "stop http"]
    assert not service.core.worker_alive and not service.ready


def test_an_early_frontend_that_cannot_open_closes_what_opened(monkeypatch, log) -> None:
    service = build(
        monkeypatch, log, frontend("one", early=True), frontend("two", early=True, fails=True)
    )
    with pytest.raises(OSError):
        service.open()
    assert log == ["start one", "stop two", "stop one"]


def test_one_frontend_failing_to_stop_does_not_keep_the_others_running(monkeypatch, log) -> None:
    service = build(monkeypatch, log, frontend("a"), frontend("broken-stop"), frontend("c"))
    service.load()
    service.start()
    service.shutdown()
    assert log[3:] == ["stop c", "stop broken-stop", "stop a"]


def test_every_utterance_event_reaches_the_started_frontends(monkeypatch, log) -> None:
    seen: list[str] = []

    class Watching(frontend("watch")):  # type: ignore[misc]
        def observe(self, utterance: Any, event: Any) -> None:
            seen.append(event.name)

    service = build(monkeypatch, log, Watching)
    service.load()
    service.start()
    try:
        utterance = service.core.say_local("Hello.")
        deadline = time.monotonic() + 5
        while utterance.outcome is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        service.shutdown()
    assert seen[0] == "queued" and seen[-1] == "finished"
