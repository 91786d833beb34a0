"""Configuration: TOML file, environment overrides, errors that name the key."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from magpie_tts.daemon.config import ConfigError, load_config


def test_defaults_without_a_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    config = load_config(empty, environ={})
    assert config.mqtt.base_topic == "magpie"
    assert config.mqtt.site_id == "default"
    assert config.audio.device == "default"
    # default ALSA buffer stays below 50 ms at 22.05 kHz
    assert config.audio.period_frames * config.audio.periods / 22050 < 0.05


def test_toml_then_env_override(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nport = 1999\nbase_topic = "house/"\n[audio]\nvolume = 0.5\n')
    config = load_config(
        path, environ={"MAGPIE_TTS_MQTT__PORT": "2001", "MAGPIE_TTS_ENGINE__SCHEDULE": "[8, 16]"}
    )
    assert config.mqtt.port == 2001
    assert config.mqtt.base_topic == "house"
    assert config.audio.volume == 0.5
    assert config.engine.schedule == (8, 16)


@pytest.mark.parametrize(
    ("toml", "env", "key"),
    [
        ("[mqtt]\nport = 70000\n", {}, "mqtt.port"),
        ("[audio]\nperiods = 1\n", {}, "audio.periods"),
        ("[audio]\nvolum = 1\n", {}, "audio.volum"),
        ("", {"MAGPIE_TTS_ENGINE__PROVIDER": "quantum"}, "engine.provider"),
        ("", {"MAGPIE_TTS_MQTT__BASE_TOPIC": "a/#"}, "mqtt.base_topic"),
        ("[engine]\nseed = -1\n", {}, "engine.seed"),
        ("", {"MAGPIE_TTS_ENGINE__SEED": "lucky"}, "engine.seed"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, toml: str, env: dict, key: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config(path, environ=env)


@pytest.mark.parametrize(
    "name", ["MAGPIE_TTS_LIMITS_MAX_QUEUE", "MAGPIE_TTS_LIMITS__", "MAGPIE_TTS_A__B__C"]
)
def test_env_variable_that_names_no_setting_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("")
    with pytest.raises(ConfigError, match=name):
        load_config(path, environ={name: "5"})
    assert load_config(path, environ={"MAGPIE_TTS_TEST_HOOKS": "1"})


def test_broken_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[mqtt\nport=")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_config(bad, environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml", environ={})


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "c.toml").write_text("")
    folder.chmod(0)
    try:
        if os.access(folder / "c.toml", os.R_OK):
            pytest.skip("running with permission to read anything (root)")
        with pytest.raises(ConfigError, match="Permission denied"):
            load_config(folder / "c.toml", environ={})
    finally:
        folder.chmod(0o755)


def test_password_file_is_read_and_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    path = tmp_path / "c.toml"
    path.write_text(f'[mqtt]\nusername = "u"\npassword_file = "{secret}"\n')
    config = load_config(path, environ={})
    assert config.mqtt.resolved_password() == "s3cret"
    assert "s3cret" not in repr(config)


def test_logging_goes_to_stderr_unless_journald_listens(monkeypatch) -> None:
    import logging

    from magpie_tts.daemon import systemd

    monkeypatch.setenv("INVOCATION_ID", "x")
    monkeypatch.setattr(systemd, "JOURNAL_SOCKET", Path("/nonexistent/journal/socket"))
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        systemd.setup_logging("INFO")
        assert len(root.handlers) == 1 and type(root.handlers[0]) is logging.StreamHandler
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
