"""`make run`'s main job: daemon + private broker + mosquitto_pub, spoken into a WAV."""

from __future__ import annotations

import os
import subprocess
import sys
import wave


def test_demo_speaks_intelligibly_into_the_wav_it_names(tmp_path, prepared_state, recognizer):
    # (not "Hello!": alone, the recognizer hears it as "Oh, well" about one time in 20)
    text = (
        "Good evening. The kitchen lights are on, and dinner is ready. "
        "Please come to the table now."
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGPIE_TTS_")}
    env.update(
        {
            "MAGPIE_TTS_ENGINE__STATE_DIR": str(prepared_state),
            "MAGPIE_TTS_CONFIG": str(tmp_path / "none.toml"),
            "MAGPIE_TTS_ENGINE__CACHE_MB": "0",
            # no INT8 prepared into the session's shared state dir (test_int8_background)
            "MAGPIE_TTS_ENGINE__INT8": "fp32",
        }
    )
    (tmp_path / "none.toml").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "magpie_tts.tools.demo", text, "--wav"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wav_path = tmp_path / "build" / "magpie-demo.wav"
    assert f"spoken into {wav_path}" in result.stdout
    assert "; precision fp32" in result.stdout  # which precision spoke
    with wave.open(str(wav_path)) as handle:
        assert handle.getframerate() == 22050 and handle.getnframes() > 22050
    rate, heard = recognizer.wer(wav_path, text)
    assert rate <= 0.1, heard
