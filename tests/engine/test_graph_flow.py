"""The frontend split at the flow (engine/graph/flow_split.py; at run time
engine/stream/latent.py): the flow runs over the frames the decoder's windows read, and
the audio is the same as from the whole frontend."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import onnx
import pytest
from magpie_tts.engine import StreamingSynthesizer, SynthesisOptions
from magpie_tts.engine.graph.flow_split import find_flow_cut, remove_frontend, split_flow
from magpie_tts.engine.stream.latent import FlowLatent

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
# A cut first unit (no comma in 12 words), then a later sentence: both context paths.
TEXT = (
    "The weather in Boston this afternoon will stay mostly sunny with a gentle breeze "
    "from the west. Tomorrow brings rain."
)


@pytest.fixture(scope="module")
def whole(voice, synth) -> StreamingSynthesizer:
    """The same engine with the frontend run whole (the flow over every frame at once)."""
    return StreamingSynthesizer(voice, dataclasses.replace(synth.config, windowed_flow=False))


def test_the_voice_splits_at_the_flow_with_its_receptive_field(synth) -> None:
    assert synth.flow is not None
    assert synth.flow.context == 32  # 4 coupling layers × 4 WaveNet layers × (5 - 1) / 2
    encoder = onnx.load(str(synth.flow.encoder), load_external_data=False)
    outputs = {o.name for o in encoder.graph.output}
    assert {synth.flow.mean, synth.flow.scale, synth.flow.mask, synth.durations_name} <= outputs
    # It draws no noise itself: the duration predictor's comes in, z_p's is added after.
    assert not [n for n in encoder.graph.node if n.op_type.startswith("Random")]
    assert [name for name, _ in synth.flow.noises] == [
        i.name for i in encoder.graph.input if "RandomNormal" in i.name
    ]
    assert [dims for _, dims in synth.flow.noises] == [(1, 2)]  # (1, 2, phoneme ids)


def test_a_seed_makes_the_same_text_sound_the_same(voice, synth) -> None:
    assert synth.config.seed is not None
    text = "Turning off the lights in the kitchen. Good night."
    first, again = synth.synthesize(text), synth.synthesize(text)
    assert np.array_equal(first, again)
    other = StreamingSynthesizer(voice, dataclasses.replace(synth.config, seed=None))
    unseeded = [other.synthesize(text) for _ in range(2)]
    # Fresh noise: the durations and the sound differ from draw to draw.
    assert len(unseeded[0]) != len(unseeded[1]) or not np.array_equal(*unseeded)
    reseeded = StreamingSynthesizer(
        voice, dataclasses.replace(synth.config, seed=synth.config.seed + 1)
    )
    assert not np.array_equal(reseeded.synthesize(text)[: len(first)], first[: len(first)])


def test_a_split_that_fails_its_probes_keeps_the_whole_frontend(synth, tmp_path, caplog) -> None:
    """The noise's shape must follow the phoneme ids and the split must reproduce the
    whole frontend; where the probes say otherwise the frontend runs whole."""
    probes = synth.flow_probes()
    voice_noise = synth.frontend_feeds(
        synth.phonemizer.clause_ids("Hello there."),
        SynthesisOptions(noise_w=0.0),  # same durations
    )
    cases = {
        "not (dims..., ids)": [(ids + 1, feeds) for ids, feeds in probes],  # miscounted
        "cannot run it": [(ids, {**feeds, "scales": feeds["scales"][:1]}) for ids, feeds in probes],
        # the prior's noise on: the whole frontend's own draw is not the split's
        "max |Δz|": [(len(voice_noise["input"][0]), voice_noise), *probes],
    }
    for index, (reason, bad) in enumerate(cases.items()):
        frontend = tmp_path / str(index) / "frontend.onnx"
        frontend.parent.mkdir()
        frontend.write_bytes(synth.graph_paths["frontend"].read_bytes())
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="magpie_tts.engine.graph.flow_split"):
            assert (
                split_flow(frontend, synth.latent_name, synth.durations_name, lambda bad=bad: bad)
                is None
            )
        assert reason in caplog.text
        assert not (frontend.parent / "frontend.encoder.onnx").exists()
        # The graph's verdict is remembered beside it: good probes do not rebuild it.
        assert (
            split_flow(frontend, synth.latent_name, synth.durations_name, synth.flow_probes) is None
        )


def test_a_graph_without_a_flow_is_not_cut(synth) -> None:
    decoder = onnx.load(str(synth.graph_paths["decoder"]))
    assert find_flow_cut(decoder, decoder.graph.output[0].name) is None


@pytest.mark.parametrize("text", ["Hi.", "Turning off the lights in the kitchen.", TEXT])
def test_windowed_flow_audio_equals_the_whole_frontend(synth, whole, text: str) -> None:
    windowed = np.concatenate([c.pcm for c in synth.stream(text, QUIET)])
    reference = np.concatenate([c.pcm for c in whole.stream(text, QUIET)])
    assert len(windowed) == len(reference)
    # Exact up to float rounding in the flow's convolutions (measured: identical samples).
    assert np.max(np.abs(windowed.astype(np.int32) - reference)) <= 1


def test_the_first_read_runs_the_flow_over_its_window_only(synth) -> None:
    ids = synth.phonemizer.clause_ids(TEXT)
    prior, mask, _ = synth.prior(ids, QUIET, durations=False)
    reference = synth.run_flow(prior, mask)
    frames = prior.shape[2]
    runs: list[int] = []

    def run(p: np.ndarray, m: np.ndarray) -> np.ndarray:
        runs.append(p.shape[2])
        return synth.run_flow(p, m)

    # Float rounding differs with the run's length (~1e-4); 8 frames too little context
    # measured 1e-3, 16 too little 2e-2: 5e-4 tells them apart.
    z = FlowLatent(run, prior, mask, synth.flow.context, (0, frames), small_first=True)
    assert z.shape == reference.shape
    first = z[:, :, 0:27]
    assert runs == [27 + synth.flow.context]  # the first sound waits for 59 frames of flow
    np.testing.assert_allclose(first, reference[:, :, 0:27], atol=5e-4)
    rest = z[:, :, 5 : frames + 40]  # overlapping, and past the end as padded windows read
    assert len(runs) == 2 and sum(runs) < frames + 3 * synth.flow.context
    np.testing.assert_allclose(rest, reference[:, :, 5:], atol=5e-4)
    z[:, :, 100:200]  # all made: no more runs
    assert len(runs) == 2


def test_the_flow_skips_frames_no_window_reads(synth) -> None:
    ids = synth.phonemizer.clause_ids(TEXT)
    prior, mask, _ = synth.prior(ids, QUIET, durations=False)
    reference = synth.run_flow(prior, mask)
    runs: list[int] = []

    def run(p: np.ndarray, m: np.ndarray) -> np.ndarray:
        runs.append(p.shape[2])
        return synth.run_flow(p, m)

    z = FlowLatent(run, prior, mask, synth.flow.context, (100, 180), small_first=False)
    np.testing.assert_allclose(z[:, :, 100:140], reference[:, :, 100:140], atol=5e-4)
    np.testing.assert_allclose(z[:, :, 140:180], reference[:, :, 140:180], atol=5e-4)
    assert runs == [80 + 2 * synth.flow.context]  # one run, over the reads and context


def test_a_small_first_read_reports_the_whole_flows_cost(synth) -> None:
    """The pacing needs what a later unit's first turn costs (the flow over all its
    frames), not the small first window's share."""
    ids = synth.phonemizer.clause_ids(TEXT)
    prior, mask, _ = synth.prior(ids, QUIET, durations=False)
    frames = prior.shape[2]
    z = FlowLatent(synth.run_flow, prior, mask, synth.flow.context, (0, frames), True)
    assert z.whole_s() == 0.0  # nothing run yet
    z[:, :, 0:27]
    assert z.spent_frames == 27 + synth.flow.context
    assert z.whole_s() == pytest.approx(z.spent_s * frames / z.spent_frames)
    assert z.whole_s() > 2 * z.spent_s


def test_a_seed_outside_32_bits_is_refused_at_configuration(synth) -> None:
    for seed in (-1, 2**32):
        with pytest.raises(ValueError, match="seed"):
            dataclasses.replace(synth.config, seed=seed)


def test_removing_a_frontend_removes_its_split(synth, tmp_path) -> None:
    """A rejected INT8 frontend leaves no split of itself behind to be loaded."""
    frontend = tmp_path / "frontend.int8.onnx"
    frontend.write_bytes(synth.graph_paths["frontend"].read_bytes())
    assert split_flow(frontend, synth.latent_name, synth.durations_name, synth.flow_probes)
    assert len(list(tmp_path.iterdir())) == 4  # the graph, encoder, flow, record
    remove_frontend(frontend)
    assert not list(tmp_path.iterdir())
