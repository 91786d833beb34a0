"""INT8: the gate's verdicts, decoder selection from the report, and a real quantization."""

from __future__ import annotations

import statistics

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from magpie_tts.engine import SynthesisOptions
from magpie_tts.engine.graph.split import split_voice
from magpie_tts.engine.int8.calibration import (
    CALIBRATION_TEXTS,
    GATE_TEXTS,
    calibration_windows,
    latents,
    latents_of,
)
from magpie_tts.engine.int8.candidates import conv_groups, quantize_candidate
from magpie_tts.engine.int8.flow import quantize_flow
from magpie_tts.engine.int8.gate import MAX_LOG_MEL_DB, gate_verdict, pick_candidate
from magpie_tts.engine.int8.measures import (
    decode_latent,
    load_decoder,
    log_mel_distance,
    pause_floor_dbfs,
)
from magpie_tts.engine.int8.race import measure_layout
from magpie_tts.engine.precision import (
    CHANNELS_LAST,
    disabled_optimizers,
    expands,
    flow_path,
    int8_paths,
    select_decoder,
    select_frontend,
    write_report,
)
from magpie_tts.engine.runtime import NHWC_LAYOUT, RuntimeConfig, choose_provider, make_session
from onnxruntime.quantization import CalibrationMethod

MOS = {"p808": 3.9, "ovrl": 3.3, "sig": 3.5, "bak": 4.1}
GOOD = {
    "speedup": 1.3,
    "log_mel_db": 1.5,
    "pause_floor_dbfs": -76.0,
    "mos_fp32": MOS,
    "mos_int8": {**MOS, "p808": 3.85, "ovrl": 3.27},
    "wer_fp32": 0.04,
    "wer_int8": 0.05,
}


def test_gate_passes_a_fast_faithful_model() -> None:
    passed, reason = gate_verdict(GOOD)
    assert passed, reason


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"speedup": 1.02}, "not fast enough"),
        ({"log_mel_db": 6.5}, "log-mel"),
        ({"pause_floor_dbfs": -60.0}, "hiss"),
        ({"wer_int8": 0.07}, "WER"),
        ({"mos_int8": {**MOS, "p808": 3.75}}, "P.808"),
        ({"mos_int8": {**MOS, "ovrl": 3.2}}, "OVRL"),
        ({"mos_int8": None}, "DNSMOS not measured"),
    ],
)
def test_gate_fails_on_each_bound(change: dict, words: str) -> None:
    passed, reason = gate_verdict({**GOOD, **change})
    assert not passed and words in reason


def test_gate_without_a_recognizer_judges_by_ear_and_says_so() -> None:
    report = {k: v for k, v in GOOD.items() if not k.startswith("wer")}
    passed, reason = gate_verdict(report)
    assert passed and "WER not measured" in reason and "DNSMOS" in reason


def test_decoder_selection_follows_the_report(voice, state_dir) -> None:
    split = split_voice(voice, state_dir)
    model, report = int8_paths(split)
    assert select_decoder(split, "auto")[1] == "fp32"  # nothing prepared
    model.write_bytes(split.decoder.read_bytes())
    try:
        write_report(split, {"passed": False, "reason": "too noisy"})
        _, precision, why = select_decoder(split, "auto")
        assert precision == "fp32" and "too noisy" in why
        assert select_decoder(split, "int8")[1] == "int8"  # forced
        write_report(split, {"passed": True, "reason": "fine"})
        assert select_decoder(split, "auto") == (model, "int8", "INT8 passed its gate: fine")
        assert select_decoder(split, "fp32")[1] == "fp32"
    finally:
        model.unlink()
        report.unlink()


def test_metrics_tell_noise_from_signal() -> None:
    rng = np.random.default_rng(1)
    t = np.arange(22050) / 22050
    speechlike = (np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)
    assert log_mel_distance(speechlike, speechlike, 22050) == 0.0
    noisy = speechlike + rng.normal(0, 0.01, len(t)).astype(np.float32)
    assert log_mel_distance(speechlike, noisy, 22050) > 3.0
    assert pause_floor_dbfs(noisy, 22050) > pause_floor_dbfs(speechlike, 22050) + 20


def test_static_int8_decoder_keeping_the_last_stage_fp32_stays_faithful(
    voice, synth, state_dir, tmp_path
) -> None:
    """A real, small calibration: the variant `prepare` picks here is close to fp32."""
    split = split_voice(voice, state_dir)
    zs = latents(
        synth,
        "Good morning! The coffee machine is warming up and will be ready soon. "
        "It will be windy tonight with gusts up to fifty kilometers per hour.",
    )
    groups = conv_groups(split)
    assert groups["output"] and len([g for g in groups if g.startswith("upsample")]) >= 2
    last_stage = sorted(g for g in groups if g.startswith("upsample"))[-1]
    out = tmp_path / "int8.onnx"
    quantize_candidate(
        split,
        calibration_windows(zs, 96),
        out,
        groups["output"] + groups[last_stage],
        CalibrationMethod.Percentile,
    )
    fp32, int8 = load_decoder(split.decoder, voice), load_decoder(out, voice)
    distances = [
        log_mel_distance(decode_latent(fp32, z), decode_latent(int8, z), voice.sample_rate)
        for z in zs
    ]
    assert statistics.mean(distances) < 4.0
    assert out.stat().st_size < 0.8 * split.decoder.stat().st_size
    # Without the NHWC transformer the same kernels' arithmetic runs: the same audio
    # (one whole latent each: windows follow each decoder's measured speed).
    plain = load_decoder(out, voice, (NHWC_LAYOUT,))
    for z in zs:
        assert np.array_equal(plain.decode(z).copy(), int8.decode(z).copy())
    layout = measure_layout(None, out, voice, zs[:1])  # no channels-last graph to race
    assert layout["cpu_layout"] in ("nchw", "nhwc") and layout["layout_speedups"]["nchw"] > 0


def test_the_int8_layout_follows_the_report(voice, state_dir) -> None:
    """The NHWC transformer is left out only for INT8 graphs, and only where prepare
    measured them faster without it; sessions are made that way."""
    split = split_voice(voice, state_dir)
    _, report = int8_paths(split)
    assert disabled_optimizers(split, "int8") == ()  # nothing prepared
    try:
        write_report(split, {"passed": True, "cpu_layout": "nchw"})
        assert disabled_optimizers(split, "int8") == (NHWC_LAYOUT,)
        assert disabled_optimizers(split, "fp32") == ()
        write_report(split, {"passed": True, "cpu_layout": "nhwc"})
        assert disabled_optimizers(split, "int8") == ()
        write_report(split, {"passed": True, "cpu_layout": CHANNELS_LAST})
        assert disabled_optimizers(split, "int8") == ()
    finally:
        report.unlink()
    asked: list[dict] = []

    def create(path, sess_options, providers, **extra):
        asked.append(extra)
        return ort.InferenceSession(path, sess_options, providers, **extra)

    choice = choose_provider(RuntimeConfig(provider="cpu"))
    make_session(split.decoder, RuntimeConfig(provider="cpu"), choice, create=create)
    plain = RuntimeConfig(provider="cpu", disabled_optimizers=(NHWC_LAYOUT,))
    make_session(split.decoder, plain, choice, create=create)
    assert asked == [{}, {"disabled_optimizers": [NHWC_LAYOUT]}]


def test_frontend_selection_follows_the_report(voice, state_dir) -> None:
    """The INT8-flow frontend runs only with the INT8 decoder, and only when adopted."""
    split = split_voice(voice, state_dir)
    _, report = int8_paths(split)
    flow = flow_path(split)
    flow.write_bytes(split.frontend.read_bytes())
    try:
        write_report(split, {"passed": True, "frontend": "flow int8"})
        assert select_frontend(split, "int8") == (flow, "flow int8")
        assert select_frontend(split, "fp32") == (split.frontend, "fp32")
        write_report(split, {"passed": True, "frontend": "fp32"})
        assert select_frontend(split, "int8") == (split.frontend, "fp32")
    finally:
        flow.unlink()
        report.unlink()
    assert select_frontend(split, "int8") == (split.frontend, "fp32")  # nothing prepared


def test_int8_flow_keeps_every_duration_and_stays_close(voice, synth, state_dir, tmp_path) -> None:
    """Only the flow is quantized: it runs after the duration predictor, so every
    phoneme keeps its exact frame count; the latent it makes decodes close to fp32."""
    split = split_voice(voice, state_dir)
    out = tmp_path / "frontend.int8.onnx"
    assert quantize_flow(synth, split, out, CALIBRATION_TEXTS[:4])
    model = onnx.load(str(out))
    dequantized = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    fed = [  # the compute nodes that take an INT8 (dequantized) input
        n
        for n in model.graph.node
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and dequantized.intersection(n.input)
    ]
    convs = [n.name for n in fed if n.op_type == "Conv"]
    assert convs and all("/flow/" in name for name in convs), convs
    # The calibration's noise was seeded; the graph it writes draws fresh noise again.
    assert all(
        a.name != "seed"
        for n in model.graph.node
        if n.op_type.startswith("Random")
        for a in n.attribute
    )
    cpu = ["CPUExecutionProvider"]
    fp32_front = ort.InferenceSession(str(split.frontend), providers=cpu)
    int8_front = ort.InferenceSession(str(out), providers=cpu)
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    names = [synth.latent_name, synth.durations_name]
    for text in GATE_TEXTS[:6]:
        feeds = synth.frontend_feeds(synth.phonemizer.clause_ids(text), quiet)
        z_fp32, durations_fp32 = fp32_front.run(names, feeds)
        z_int8, durations_int8 = int8_front.run(names, feeds)
        assert np.array_equal(durations_fp32, durations_int8)
        assert z_int8.shape == z_fp32.shape
        distance = log_mel_distance(
            decode_latent(synth.decoder, z_fp32),
            decode_latent(synth.decoder, z_int8),
            voice.sample_rate,
        )
        assert distance < MAX_LOG_MEL_DB
    # With noise on, draw k of both paths is the same noise (paired): same durations, and
    # what differs is the quantization's.
    int8_latents = latents_of(out, synth)
    for text in GATE_TEXTS[6:8]:
        reference, tested = latents(synth, text, 1), int8_latents(text, SynthesisOptions(), 1)
        assert [z.shape for z in reference] == [z.shape for z in tested]
        distance = log_mel_distance(
            decode_latent(synth.decoder, np.concatenate(reference, axis=2)),
            decode_latent(synth.decoder, np.concatenate(tested, axis=2)),
            voice.sample_rate,
        )
        assert distance < MAX_LOG_MEL_DB


def test_quality_decides_between_candidates_tied_on_speed() -> None:
    def entry(good: bool, slowness: float, name: str, distance: float, kept: str = "") -> tuple:
        slow = slowness if good else distance
        return (not good, slow, 0, name, None, distance, -75.0, kept or name)

    fastest = entry(True, 0.80, "fastest", 2.7)
    closer = entry(True, 0.86, "closer", 1.3)  # within 10 % of the fastest: a tie
    slow = entry(True, 0.95, "slow", 1.0)  # closest of all, but clearly slower
    hiss = entry(False, 0.5, "hiss", 5.0)
    assert pick_candidate([fastest, closer, slow, hiss])[3] == "closer"
    assert pick_candidate([fastest, slow, hiss])[3] == "fastest"
    assert pick_candidate([hiss, entry(False, 0.6, "less", 4.5)])[3] == "less"  # none passes
    # The same convs kept fp32 at another percentile: the same kernels, one speed (the
    # median of its timings), so a slow timing of the closer one is noise.
    finer = entry(True, 1.00, "finer", 0.9, kept="slow")
    quick = entry(True, 0.60, "quick", 1.1, kept="slow")
    assert pick_candidate([fastest, slow, finer])[3] == "fastest"  # median 0.975: clearly slower
    assert pick_candidate([fastest, finer, quick])[3] == "finer"  # median 0.80: a tie


def test_gate_latents_repeat_by_seed(synth) -> None:
    """Calibration and gate draws are seeded: a prepare repeats."""
    text = GATE_TEXTS[6]
    first, again = latents(synth, text, 1), latents(synth, text, 1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    other = latents(synth, text, 2)
    assert any(
        a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(first, other, strict=True)
    )


def test_only_an_int8_decoder_gated_through_the_expander_runs_with_it(voice, state_dir) -> None:
    split = split_voice(voice, state_dir)
    _, report = int8_paths(split)
    assert not expands(split, "int8")  # nothing prepared
    try:
        write_report(split, {"passed": True, "expander": True})
        assert expands(split, "int8") and not expands(split, "fp32")
        write_report(split, {"passed": True})  # an older prepare's report
        assert not expands(split, "int8")
    finally:
        report.unlink()
