"""Streaming synthesis on the real default voice (CPU)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from magpie_tts.engine import StopToken, SynthesisOptions, TextError, VoiceError, load_voice
from magpie_tts.engine.graph.split import find_latent, split_voice
from magpie_tts.engine.stream.decoder import BUCKET_STEP, bucket_lengths, plan_windows

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
MEDIUM = (
    "The quick brown fox jumps over the lazy dog while the weather outside stays sunny "
    "and warm for the whole afternoon"
)


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - test) ** 2)
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(reference**2.0) / noise)


@pytest.fixture(scope="module")
def full_session(voice) -> ort.InferenceSession:
    return ort.InferenceSession(str(voice.model_path), providers=["CPUExecutionProvider"])


def exactness_floor(synth, frames: int, first_step: int) -> float:
    """SNR a chunked decode must reach against the full one: float noise (100 dB) unless
    its plan pads the unit's end (edge frames: 83-91 dB measured, below 16-bit LSB)."""
    decoder = synth.decoder
    plan = plan_windows(
        frames, decoder.schedule, decoder.context, first_step, None, decoder.affordable_core
    )
    return 80.0 if any(w.stop > frames for w in plan) else 100.0


# The original model end to end against the split frontend (its layer norms fused: a
# different summation order) and the decoder: float rounding, 94-99 dB measured.
FRONTEND_FLOOR_DB = 80.0


def full_decode(full_session, synth, ids: list[int]) -> np.ndarray:
    feeds = {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": synth._scales(QUIET),
    }
    return full_session.run(None, feeds)[0].reshape(-1)


def whole_decode(synth, z: np.ndarray) -> np.ndarray:
    """The decoder graph over all of z in one run: what chunking must reproduce."""
    session = synth.decoder.session
    return session.run(None, {synth.decoder.latent_name: z})[0].reshape(-1)


def test_split_point_is_found_structurally(voice) -> None:
    model = onnx.load(str(voice.model_path))
    latent = find_latent(model)
    consumers = [n for n in model.graph.node if latent in n.input]
    assert [n.op_type for n in consumers] == ["Conv"]
    # Renaming every tensor must not move the seam: the search uses structure only.
    renames = {}
    for index, node in enumerate(model.graph.node):
        for k, name in enumerate(node.output):
            if name != model.graph.output[0].name:
                renames[name] = f"t{index}_{k}"
                node.output[k] = renames[name]
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            node.input[k] = renames.get(name, name)
    assert find_latent(model) == renames[latent]


def test_frontend_then_full_decoder_equals_unsplit_model(synth, full_session) -> None:
    ids = synth.phonemizer.clause_ids("Turning off the lights in the living room.")
    reference = full_decode(full_session, synth, ids)
    z = synth.latent(ids, QUIET)
    whole = synth.decoder.session.run(None, {synth.decoder.latent_name: z})[0].reshape(-1)
    assert np.max(np.abs(reference - whole)) < 1e-4


@pytest.mark.parametrize(
    "text",
    ["Hi.", "Turning off the lights.", MEDIUM, MEDIUM + " and " + MEDIUM.lower()],
)
def test_chunked_decode_equals_full_decode(synth, full_session, text: str) -> None:
    ids = synth.phonemizer.clause_ids(text)
    original = full_decode(full_session, synth, ids)
    z = synth.latent(ids, QUIET)
    reference = whole_decode(synth, z)
    chunks = [c.copy() for c in synth.decoder.stream(z)]
    streamed = np.concatenate(chunks)
    assert len(streamed) == len(reference) == len(original)
    assert snr_db(reference, streamed) >= exactness_floor(synth, z.shape[2], 0)
    assert snr_db(original, streamed) >= FRONTEND_FLOOR_DB
    if z.shape[2] > 64:  # a small first chunk, then larger ones (how many: decoder speed)
        assert len(chunks) >= 2
        assert len(chunks[0]) < max(len(c) for c in chunks[1:])


def test_context_is_the_decoders_receptive_field(synth, voice, state_dir) -> None:
    """The context read from the graph is exactly how far one frame of z reaches: a
    changed frame changes output only that many frames either side, and does change it
    at that distance (so a smaller context would not be exact)."""
    reach = split_voice(voice, state_dir).context_frames
    assert reach is not None and synth.decoder.context == reach
    session = synth.decoder.session
    rng = np.random.default_rng(7)
    z = rng.standard_normal((1, synth.decoder.channels, 64)).astype(np.float32)
    changed = z.copy()
    changed[:, :, 32] += 1.0
    before, after = (
        session.run(None, {synth.decoder.latent_name: x})[0].reshape(-1) for x in (z, changed)
    )
    hop = voice.hop_length
    moved = np.flatnonzero(before != after) / hop  # output position in frames
    assert moved.min() >= 32 - reach and moved.max() < 33 + reach
    assert moved.min() < 32 - (reach - 1) or moved.max() >= 33 + (reach - 1)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.integers(1, 2000),
    context=st.sampled_from([0, 4, 8, 16]),
    first_step=st.integers(0, 5),
    speed=st.one_of(st.none(), st.integers(0, 64)),
    first_core=st.sampled_from([0, 0, 20, 40, 100, 400]),
)
def test_window_plan_covers_every_frame_with_context_on_warmed_lengths(
    frames: int, context: int, first_step: int, speed: int | None, first_core: int
) -> None:
    schedule = (16, 32, 64, 128, 256)
    buckets = set(bucket_lengths(schedule, context))
    affordable = None if speed is None else (lambda ahead: speed * ahead)
    windows = list(
        plan_windows(frames, schedule, context, first_step, None, affordable, first_core=first_core)
    )
    assert windows[0].keep_from == 0 and windows[-1].keep_to == frames
    for before, after in itertools.pairwise(windows):
        assert before.keep_to == after.keep_from
    for w in windows:
        assert w.stop - w.start in buckets  # only warmed shapes, tails and short units too
        assert 0 <= w.start <= w.keep_from < w.keep_to <= min(w.stop, frames)
        assert w.keep_from - w.start >= min(context, w.keep_from)
        assert min(w.stop, frames) - w.keep_to >= min(context, frames - w.keep_to)
        # padding past the end (inexact for the last frames) only for very short units,
        # or by less than a bucket step in a grown last window
        assert (
            w.stop <= frames
            or frames < schedule[1] + 2 * context
            or (w == windows[-1] and w.stop - frames < BUCKET_STEP)
        )
    if first_step == 0 and frames > schedule[0] + context and first_core <= schedule[0]:
        assert windows[0].stop - windows[0].start == schedule[0] + context  # small first chunk


@settings(max_examples=300, deadline=None)
@given(
    frames=st.integers(2, 1200),
    context=st.sampled_from([0, 8, 16]),
    first_step=st.integers(0, 5),
    bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_window_plan_of_a_kept_range_uses_the_frames_around_it_as_context(
    frames: int, context: int, first_step: int, bounds: tuple[float, float]
) -> None:
    """A unit spoken with context words decodes only its own frames, exactly."""
    lo, hi = sorted(int(b * frames) for b in bounds)
    hi = max(hi, lo + 1)
    if hi > frames:
        lo, hi = frames - 1, frames
    schedule = (16, 32, 64, 128, 256)
    buckets = set(bucket_lengths(schedule, context))
    windows = list(plan_windows(frames, schedule, context, first_step, keep=(lo, hi)))
    assert windows[0].keep_from == lo and windows[-1].keep_to == hi
    for before, after in itertools.pairwise(windows):
        assert before.keep_to == after.keep_from
    for w in windows:
        assert w.stop - w.start in buckets
        assert w.keep_from - w.start >= min(context, w.keep_from)
        assert min(w.stop, frames) - w.keep_to >= min(context, frames - w.keep_to)


def test_a_fast_decoder_takes_fewer_larger_windows_after_the_first() -> None:
    """Where the decoder can afford it (its speed against the audio already made), the
    windows after the small first one grow past the schedule: fewer context frames are
    decoded twice; a slow decoder keeps the schedule."""
    schedule, context, frames = (16, 32, 64, 128, 256, 512), 16, 300
    plain = list(plan_windows(frames, schedule, context))
    slow = list(plan_windows(frames, schedule, context, affordable=lambda ahead: 0))
    fast = list(plan_windows(frames, schedule, context, affordable=lambda ahead: 40 * ahead))
    assert slow == plain
    assert fast[0] == plain[0]  # first audio is not delayed
    assert len(fast) < len(plain)
    decoded = [sum(w.stop - w.start for w in plan) for plan in (plain, fast)]
    assert decoded[1] < decoded[0]
    assert {w.stop - w.start for w in fast} <= set(bucket_lengths(schedule, context))


def test_a_later_unit_starts_with_the_core_its_budget_affords_while_others_wait() -> None:
    """While other streams wait for a turn, a later unit's first window is no larger than
    the audio the stream has ahead affords (a 512-frame turn would run the others dry);
    with audio enough ahead, or nobody waiting, it starts at the schedule's largest core."""
    schedule, context, frames = (16, 32, 64, 128, 256, 512), 11, 600
    last = len(schedule) - 1

    def first_core(contended: bool, ahead: int) -> int:
        plan = list(
            plan_windows(frames, schedule, context, last, None, lambda f: f // 2, contended, ahead)
        )
        assert plan[0].keep_from == 0 and plan[-1].keep_to == frames
        return plan[0].keep_to - plan[0].keep_from

    assert first_core(contended=True, ahead=100) == 32  # affords 50 frames
    assert first_core(contended=True, ahead=0) == schedule[0]  # never below the first core
    assert first_core(contended=True, ahead=2000) == 512
    assert first_core(contended=False, ahead=0) >= 512


def test_a_first_window_holds_the_audio_asked_for_while_others_wait_to_start() -> None:
    """An utterance's first window makes at least `first_core` frames where the unit has
    them, in the smallest warmed bucket of real frames that holds them; later windows
    continue the schedule beyond it. A later unit (audio already playing) ignores it."""
    schedule, context, frames = (16, 32, 64, 128, 256, 512), 11, 600
    buckets = bucket_lengths(schedule, context)

    def plan(first_core: int, first_step: int = 0, length: int = frames) -> list:
        windows = list(plan_windows(length, schedule, context, first_step, first_core=first_core))
        assert windows[0].keep_from == 0 and windows[-1].keep_to == length
        assert all(w.stop - w.start in buckets for w in windows)
        return windows

    assert plan(0) == plan(16) == list(plan_windows(frames, schedule, context))
    for wanted in (20, 30, 50, 100, 200):
        first = plan(wanted)[0]
        core = first.keep_to - first.keep_from
        assert core >= wanted and first.start == 0
        smaller = [b for b in buckets if b < first.stop - first.start]
        assert all(b - context < wanted for b in smaller)  # no smaller bucket holds it
    cores = [w.keep_to - w.keep_from for w in plan(50)]
    assert cores[:3] == [53, 64, 128]  # then the schedule, past the first core
    short = plan(100, length=40)  # a unit shorter than asked: its real frames, no padding
    assert all(w.stop <= 40 for w in short)
    last = len(schedule) - 1
    assert plan(100, first_step=last) == plan(0, first_step=last)


VARIED = [
    "Hi.",
    "Yes",
    "Okay.",
    "Turning off the lights.",
    MEDIUM,
    MEDIUM + " and " + MEDIUM.lower(),
    "Set a timer for twelve minutes, then remind me to call Anna about the concert.",
    "Rain is likely after three; take an umbrella and a warm coat if you go out tonight.",
    "The next train to Cambridge leaves from platform four in seven minutes.",
]


def test_decoder_is_fed_only_warmed_lengths_and_output_is_unchanged(synth, full_session) -> None:
    """Every window has a bucket length; cropping gives the full decode (float noise)."""
    buckets = set(bucket_lengths(synth.decoder.schedule, synth.decoder.context))
    fed: list[int] = []
    decode = synth.decoder.decode
    lengths = []
    try:
        synth.decoder.decode = lambda z, sid=None: (fed.append(z.shape[2]), decode(z, sid))[1]
        for text in VARIED:
            ids = synth.phonemizer.clause_ids(text)
            original = full_decode(full_session, synth, ids)
            z = synth.latent(ids, QUIET)
            reference = whole_decode(synth, z)
            assert snr_db(original, reference) >= FRONTEND_FLOOR_DB, text
            lengths.append(z.shape[2])
            for first_step in (0, len(synth.decoder.schedule) - 1):
                chunks = synth.decoder.stream(z, None, first_step)
                streamed = np.concatenate([c.copy() for c in chunks])
                assert len(streamed) == len(reference) == len(original)
                floor = exactness_floor(synth, z.shape[2], first_step)
                assert snr_db(reference, streamed) >= floor, (text, first_step)
        fed_by_units = len(fed)
        list(synth.stream(" ".join(VARIED), QUIET))  # and whole utterances, unit by unit
        assert len(fed) > fed_by_units
    finally:
        synth.decoder.decode = decode
    assert set(fed) <= buckets, sorted(set(fed) - buckets)
    assert any(n not in buckets for n in lengths)  # the texts did have unwarmed lengths


def test_stream_yields_small_first_chunk_before_the_rest_is_made(synth) -> None:
    chunks = synth.stream(MEDIUM, QUIET)
    first = next(chunks)
    assert 0 < first.duration_s < 0.5
    rest = list(chunks)
    assert sum(c.duration_s for c in rest) > 3 * first.duration_s


def test_stop_abandons_remaining_work_within_one_chunk(synth) -> None:
    stop = StopToken()
    produced = []
    for chunk in synth.stream(f"{MEDIUM}. {MEDIUM}. {MEDIUM}.", QUIET, stop):
        produced.append(chunk)
        if len(produced) == 2:
            stop.stop()
    assert len(produced) == 2
    whole = synth.stream(f"{MEDIUM}. {MEDIUM}. {MEDIUM}.", QUIET)
    assert sum(1 for _ in whole) > 4


def test_incremental_text_gives_the_same_audio_as_whole_text(synth) -> None:
    text = "Sure, here is the weather. It is 22°C in Paris; tomorrow, rain at 6:30."
    whole = synth.synthesize(text, QUIET)
    stream = synth.text_stream()
    tokens = [text[i : i + 3] for i in range(0, len(text), 3)]  # LLM-like pieces
    for token in tokens:
        stream.feed(token)
    stream.finish()
    streamed = np.concatenate([c.pcm for c in synth.stream_clauses(stream.clauses(), QUIET)])
    assert np.array_equal(whole, streamed)


def test_incremental_clause_is_ready_before_the_text_ends(synth) -> None:
    stream = synth.text_stream()
    stream.feed("Okay, I will turn on the ")
    clauses = stream.clauses(timeout=0.1)
    assert next(clauses) == "Okay,"
    assert list(clauses) == []  # the rest is incomplete and timed out
    stream.feed("lights. ")
    assert list(stream.clauses(timeout=0.1)) == ["I will turn on the lights."]


def test_speed_changes_duration(synth) -> None:
    normal = synth.synthesize("Playing relaxing music in the kitchen.", QUIET)
    fast = synth.synthesize(
        "Playing relaxing music in the kitchen.",
        SynthesisOptions(speed=2.0, noise_scale=0.0, noise_w=0.0),
    )
    assert 0.4 < len(fast) / len(normal) < 0.65


def test_phoneme_override_is_spoken(synth) -> None:
    plain = synth.synthesize("Say it.", QUIET)
    override = synth.synthesize("Say [[ ɐbɹˌɑːkɐdˈæbɹɐ ]] now.", QUIET)
    assert len(override) > len(plain) * 1.3


@pytest.mark.parametrize("text", ["", "   \n\t ", "😀🎉", "<b></b>", "\x00\x01\x02"])
def test_unspeakable_text_raises_text_error(synth, text: str) -> None:
    with pytest.raises(TextError):
        synth.stream(text)


def test_huge_text_raises_text_error(synth) -> None:
    with pytest.raises(TextError, match="too long"):
        synth.stream("word " * 20_000)


def test_unsupported_characters_are_skipped_not_fatal(synth) -> None:
    pcm = synth.synthesize("Hello ☃ wörld ∑ 你好 there.", QUIET)
    assert len(pcm) > 0.5 * synth.voice.sample_rate


@pytest.mark.parametrize("speed", [0.0, -1.0, 100.0])
def test_absurd_speed_raises_text_error(speed: float) -> None:
    with pytest.raises(TextError):
        SynthesisOptions(speed=speed)


def test_unknown_voice_path_raises_voice_error(tmp_path) -> None:
    with pytest.raises(VoiceError, match="not found"):
        load_voice(tmp_path / "nope.onnx")


@pytest.mark.parametrize("speaker", [999, 1, "1", "alice"])
def test_a_speaker_a_single_speaker_voice_lacks_is_an_error(voice, speaker) -> None:
    assert voice.num_speakers == 1
    assert voice.speaker_id(None) is None and voice.speaker_id(0) is None
    with pytest.raises(VoiceError, match="one speaker"):
        voice.speaker_id(speaker)


def test_corrupt_voice_model_raises_voice_error(tmp_path, voice, state_dir) -> None:
    from magpie_tts.engine import StreamingSynthesizer
    from magpie_tts.engine.stream.config import EngineConfig

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not an onnx model" * 100)
    (tmp_path / "bad.onnx.json").write_text(voice.config_path.read_text())
    with pytest.raises(VoiceError):
        StreamingSynthesizer(load_voice(bad), EngineConfig(cache_dir=tmp_path / "state"))


def test_unavailable_provider_falls_back_to_cpu_loudly(voice, state_dir, caplog) -> None:
    from magpie_tts.engine import StreamingSynthesizer
    from magpie_tts.engine.runtime import RuntimeConfig
    from magpie_tts.engine.stream.config import EngineConfig

    config = EngineConfig(cache_dir=state_dir, runtime=RuntimeConfig(provider="tensorrt"))
    with caplog.at_level("WARNING"):
        synth = StreamingSynthesizer(voice, config)
    if synth.choice.used != "cpu":
        pytest.skip("a GPU provider is really available here")
    assert synth.choice.warning and "tensorrt" in synth.choice.warning
    assert "tensorrt" in caplog.text
    assert len(synth.synthesize("Still speaking on the CPU.")) > 0
