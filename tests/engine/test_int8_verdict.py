"""The INT8 verdict store (the report, keyed by model, onnxruntime and CPU, written
atomically) and DNSMOS, the gate's ear."""

from __future__ import annotations

import json

import numpy as np
import pytest
from magpie_tts.engine.graph.split import SplitGraph
from magpie_tts.engine.int8 import mos as mos_module
from magpie_tts.engine.int8.mos import Dnsmos, mel_input, models_dir
from magpie_tts.engine.precision import (
    int8_paths,
    needs_preparation,
    read_report,
    select_decoder,
    verdict_key,
    write_report,
)


@pytest.fixture
def split(tmp_path) -> SplitGraph:
    folder = tmp_path / "models" / "voice-0123456789abcdef"  # one folder per model hash
    folder.mkdir(parents=True)
    split = SplitGraph(folder / "frontend.onnx", folder / "decoder.onnx", "z", ("z",))
    int8_paths(split)[0].write_bytes(b"int8")
    return split


def test_a_verdict_holds_for_this_onnxruntime_and_cpu_only(split, monkeypatch) -> None:
    assert needs_preparation(split, "auto", "cpu")
    write_report(split, {"passed": False, "reason": "too noisy"})
    # A failed verdict is a verdict: not prepared again, fp32 runs.
    assert not needs_preparation(split, "auto", "cpu")
    assert select_decoder(split, "auto")[1] == "fp32"
    write_report(split, {"passed": True, "reason": "fine"})
    assert select_decoder(split, "auto")[1] == "int8"
    # Another onnxruntime, or the state dir on another CPU: no verdict here.
    for field, value in (("onnxruntime", "0.0.1"), ("cpu", "another CPU")):
        moved = {**verdict_key(), field: value}
        monkeypatch.setattr("magpie_tts.engine.precision.verdict_key", lambda m=moved: m)
        assert read_report(split) is None and needs_preparation(split, "auto", "cpu")
        assert select_decoder(split, "auto")[1] == "fp32"
        monkeypatch.undo()
    # Turned off, or on a GPU: never prepared.
    int8_paths(split)[1].unlink()
    assert not needs_preparation(split, "fp32", "cpu")
    assert not needs_preparation(split, "auto", "cuda")


def test_a_report_without_the_key_is_no_verdict(split) -> None:
    """An older prepare's report (no key): prepared again, never trusted."""
    int8_paths(split)[1].write_text(json.dumps({"passed": True, "reason": "old"}))
    assert read_report(split) is None
    assert select_decoder(split, "auto")[1] == "fp32"


def test_a_report_interrupted_while_written_leaves_none_and_no_temp_file(
    split, monkeypatch
) -> None:
    write_report(split, {"passed": False, "reason": "first"})

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("magpie_tts.engine.precision.json.dump", full_disk)
    with pytest.raises(OSError):
        write_report(split, {"passed": True, "reason": "second"})
    # The old verdict is whole, and nothing half-written lies beside it.
    assert read_report(split)["reason"] == "first"
    assert sorted(p.name for p in split.decoder.parent.iterdir()) == [
        "decoder.int8.onnx",
        "int8_report.json",
    ]


def test_the_mel_input_is_the_p808_models_shape_and_range() -> None:
    rng = np.random.default_rng(0)
    segment = rng.normal(0, 0.1, int(9.01 * 16000)).astype(np.float32)
    mel = mel_input(segment[:-160])
    assert mel.shape == (900, 120) and mel.dtype == np.float32
    assert mel.max() == pytest.approx(1.0) and mel.min() >= -1.0 - 1e-6  # (dB + 40) / 40


@pytest.mark.skipif(models_dir() is None, reason="speechmos is not installed")
def test_dnsmos_hears_noise_in_speech(synth) -> None:
    """The same sentence with white noise 20 dB below it scores lower on every scale
    that judges noise (P.808, OVRL, BAK)."""
    pcm = synth.synthesize("Your package will arrive on Friday between noon and four.")
    clean = pcm.astype(np.float32) / 32768
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 1, len(clean)).astype(np.float32)
    noise *= np.sqrt(np.mean(clean**2) / np.mean(noise**2)) / 10  # 20 dB SNR
    judge = Dnsmos()
    good, bad = judge.score(clean, 22050), judge.score(clean + noise, 22050)
    assert good.p808 > bad.p808 + 0.2 and good.bak > bad.bak and good.ovrl > bad.ovrl
    assert 1.0 < bad.p808 < good.p808 < 5.0
    assert mos_module.mean_scores([good, bad]).p808 == pytest.approx((good.p808 + bad.p808) / 2)
