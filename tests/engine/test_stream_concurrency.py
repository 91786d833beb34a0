"""Many streams on one synthesizer: turns go to the most urgent stream, and what each
stream hears is what it would hear alone (noise off), to the decoder's exactness: a
stream's windows shrink while others wait (decoder.py), and windows cut at other frames
differ at float-noise level, or, where one plan pads a unit's end by a few frames, at
83-91 dB SNR (a few LSB of 16-bit audio)."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
from magpie_tts.engine import StreamingSynthesizer, SynthesisOptions
from magpie_tts.engine.runtime import RuntimeConfig
from magpie_tts.engine.stream.config import EngineConfig
from magpie_tts.engine.stream.turns import CLIENT, GUARD_S, PRIMARY, RECENT_S, SPEAKER, Pace, Turns

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
TEXTS = [
    "The garage door is closed, and the porch light is on for the evening.",
    "It will rain after lunch. Take an umbrella when you go out.",
    "Your package was delivered to the front porch at half past two.",
]


def test_waiting_streams_are_served_most_urgent_first() -> None:
    turns = Turns()
    served: list[str] = []
    busy = Pace(CLIENT)
    behind = Pace(CLIENT)
    behind.made(0.1)  # 0.1 s ahead of its clock, well behind `ahead`
    ahead = Pace(CLIENT)
    ahead.made(5.0)
    speaker_ahead = Pace(SPEAKER)
    speaker_ahead.made(0.3)  # the speaker's margin: more urgent than a client 0.1 s ahead
    first_client, first_speaker = Pace(CLIENT), Pace(SPEAKER)  # no audio yet

    def wait_turn(name: str, pace: Pace) -> threading.Thread:
        def run() -> None:
            with turns.turn(pace):
                served.append(name)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    with turns.turn(busy):
        threads = []
        for name, pace in [
            ("ahead", ahead),
            ("behind", behind),
            ("first-client", first_client),
            ("speaker-ahead", speaker_ahead),
            ("first-speaker", first_speaker),
        ]:
            threads.append(wait_turn(name, pace))
            while turns.waiting < len(threads):
                time.sleep(0.001)
    for thread in threads:
        thread.join(5)
    # about to run dry first (an underrun is heard), then first sound, then the rest
    assert served == ["speaker-ahead", "behind", "first-speaker", "first-client", "ahead"]


def test_a_stream_whose_next_turn_is_long_is_urgent_that_much_earlier() -> None:
    """A unit's frontend turn takes ~0.2 s on a one-thread lane: a stream 0.4 s ahead that
    needs one must go before streams still waiting for first sound, or it runs dry."""
    pace = Pace(CLIENT)
    pace.made(0.4)
    waiting = Pace(CLIENT)  # no audio yet
    assert 0.3 < pace.ahead_s() <= 0.4 and waiting.ahead_s() == 0.0
    assert pace.urgency() > waiting.urgency()  # a short next turn can wait
    pace.need_s = 0.3
    assert pace.urgency() < waiting.urgency()


def test_streams_decoding_together_run_side_by_side_in_worker_lanes() -> None:
    """Several streams decoding at once take worker lanes side by side, never beside the
    primary lane; a lone stream gets the primary lane (every thread)."""
    turns = Turns(workers=2)
    with turns.turn(Pace(CLIENT)) as lane:
        assert lane == PRIMARY == turns.lane()
    time.sleep(2 * RECENT_S)
    lock = threading.Lock()
    active: set[int] = set()
    seen: list[tuple[int, int]] = []  # (lane, lanes busy at once)
    beside_primary = []

    def stream() -> None:
        pace = Pace(CLIENT)
        for _ in range(15):
            with turns.turn(pace) as lane:
                with lock:
                    active.add(lane)
                    seen.append((lane, len(active)))
                    beside_primary.append(PRIMARY in active and len(active) > 1)
                assert turns.lane() == lane
                time.sleep(0.004)
                with lock:
                    active.discard(lane)

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(beside_primary)
    assert max(busy for _, busy in seen) == 2  # two worker lanes at once, never three
    assert {lane for lane, _ in seen} - {PRIMARY} == {1, 2}
    time.sleep(2 * RECENT_S)
    with turns.turn(Pace(SPEAKER)) as lane:
        assert lane == PRIMARY  # alone again: every thread


def test_a_first_turn_leaves_the_other_lanes_free_even_alone() -> None:
    """A narrow turn (an utterance's first) takes a worker lane even alone, so a stream
    arriving meanwhile runs beside it instead of waiting for the primary lane."""
    turns = Turns(workers=2)
    with turns.turn(Pace(CLIENT), narrow=True) as lane:
        assert lane != PRIMARY
        beside: list[int] = []
        thread = threading.Thread(target=lambda: beside.append(_take_a_turn(turns)))
        thread.start()
        thread.join(5)
        assert beside and beside[0] not in (PRIMARY, lane)  # it did not wait
    time.sleep(2 * RECENT_S)
    with turns.turn(Pace(CLIENT)) as lane:
        assert lane == PRIMARY  # a later turn of a lone stream: every thread
    with Turns(workers=0).turn(Pace(CLIENT), narrow=True) as lane:
        assert lane == PRIMARY  # no worker lanes: the only one


def _take_a_turn(turns: Turns) -> int:
    with turns.turn(Pace(CLIENT)) as lane:
        return lane


def test_the_streams_whose_turns_come_first_are_counted() -> None:
    """others(): streams waiting, in a turn, or just back from one, the asker aside."""
    turns = Turns(workers=2)
    started = Pace(CLIENT)
    started.made(0.2)
    holder, paces = Pace(CLIENT), [Pace(CLIENT), started, Pace(SPEAKER)]
    threads = [threading.Thread(target=_take_a_turn_as, args=(turns, p)) for p in paces]
    with turns.turn(holder):
        assert turns.others(holder) == 0
        for count, thread in enumerate(threads, start=1):
            thread.start()
            while turns.waiting < count:
                time.sleep(0.001)
        assert turns.others(holder) == 3
        assert turns.others(paces[0]) == 3  # two others waiting, one in a turn
        assert turns.lanes == 2
    for thread in threads:
        thread.join(5)
    assert turns.others(Pace(CLIENT)) == 4  # all just back from their turns
    time.sleep(2 * RECENT_S)
    assert turns.waiting == turns.others(holder) == 0
    assert Turns().lanes == 1


def _take_a_turn_as(turns: Turns, pace: Pace) -> None:
    with turns.turn(pace):
        pass


def test_a_first_chunk_lasts_until_the_streams_waiting_to_start_have_started(synth) -> None:
    """Streams that all ask at once: each one's first chunk is long enough to outlast
    the turns that come before its next one, those of the streams still to start and
    of those started before it (with a 16-frame chunk, 0.19 s, the first was urgent again
    at once and took a second turn before the others started; sized by the streams still
    to start only, the last ones ran dry while all took their second turns); a lone
    stream gets the small first chunk."""
    smallest = synth.config.schedule[0] * synth.voice.hop_length
    firsts: dict[int, tuple[float, int]] = {}  # stream → (when its first chunk came, samples)

    def stream(index: int) -> None:
        units = synth.clauses(TEXTS[index])
        chunks = synth.stream_clauses(units, QUIET, cache_use="bypass", priority=CLIENT)
        first = next(chunks)
        firsts[index] = (time.perf_counter(), len(first.pcm))
        for _ in chunks:
            pass

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(TEXTS))]
    with synth.turns.turn(Pace(CLIENT)):  # hold the sessions until all three wait
        for thread in threads:
            thread.start()
        while synth.turns.waiting < len(threads):
            time.sleep(0.001)
    for thread in threads:
        thread.join(60)
    in_order = [samples for _, samples in sorted(firsts.values())]
    assert min(in_order) > smallest  # the first and the last to start alike
    alone = next(synth.stream_clauses(synth.clauses(TEXTS[0]), QUIET, cache_use="bypass"))
    assert len(alone.pcm) == smallest


def test_a_first_chunk_outlasts_the_turns_of_streams_started_before_it(synth, monkeypatch) -> None:
    """The last stream to start waits, before its next turn, for those of the streams
    started before it, not only for the first turns of streams still to start (sized by
    those alone, it held one turn and ran dry while the others took their second)."""
    monkeypatch.setattr(synth, "first_turn_s", 0.05)
    time.sleep(2 * RECENT_S)  # the streams of earlier tests are no longer decoding
    asker = Pace(CLIENT)
    started = [Pace(CLIENT) for _ in range(3)]
    for pace in started:
        pace.made(0.3)
    threads = [threading.Thread(target=_take_a_turn_as, args=(synth.turns, p)) for p in started]
    with synth.turns.turn(asker):
        for count, thread in enumerate(threads, start=1):
            thread.start()
            while synth.turns.waiting < count:
                time.sleep(0.001)
        first_audio = synth.first_audio_s(0, 0.02, asker)
    for thread in threads:
        thread.join(5)
    assert synth.turns.lanes == 1
    assert first_audio == pytest.approx(GUARD_S + 3 * 0.05)


def test_the_local_speaker_keeps_its_small_first_chunk_while_clients_wait(synth) -> None:
    """The speaker's turns come before the clients' anyway: its first sound is not
    made later to outlast theirs."""
    smallest = synth.config.schedule[0] * synth.voice.hop_length
    firsts: dict[int, int] = {}

    def stream(index: int, priority: int) -> None:
        units = synth.clauses(TEXTS[index])
        chunks = synth.stream_clauses(units, QUIET, cache_use="bypass", priority=priority)
        firsts[priority] = len(next(chunks).pcm)
        for _ in chunks:
            pass

    threads = [
        threading.Thread(target=stream, args=(0, CLIENT)),
        threading.Thread(target=stream, args=(1, SPEAKER)),
    ]
    with synth.turns.turn(Pace(CLIENT)):
        for count, thread in enumerate(threads, start=1):
            thread.start()
            while synth.turns.waiting < count:
                time.sleep(0.001)
    for thread in threads:
        thread.join(60)
    assert firsts[SPEAKER] == smallest  # served first, with a client waiting behind it
    assert firsts[CLIENT] > smallest  # the speaker decodes beside it


def test_every_turn_decodes_a_window(synth, monkeypatch) -> None:
    """A unit ends with its last window's turn: no stream queues for a turn only to find
    its unit done (that wait came just when its next unit's frontend was due)."""
    turns, windows = [], []
    take_turn, decode = synth.turns.turn, synth.decoder.decode

    def counted_turn(pace, narrow=False):
        turns.append(pace)
        return take_turn(pace, narrow)

    def counted_decode(z, sid=None):
        windows.append(z.shape[2])
        return decode(z, sid)

    monkeypatch.setattr(synth.turns, "turn", counted_turn)
    monkeypatch.setattr(synth.decoder, "decode", counted_decode)
    units = synth.clauses(TEXTS[1])  # two sentences: two units
    assert len(units) == 2
    audio = list(synth.stream_clauses(units, QUIET, cache_use="bypass"))
    assert audio and len(turns) == len(windows) >= 2 * len(units)


@pytest.fixture(scope="module")
def laned(voice, state_dir) -> StreamingSynthesizer:
    """The synthesizer with two worker lanes (the daemon's default on 2 cores)."""
    runtime = RuntimeConfig(provider="cpu")
    config = EngineConfig(cache_dir=state_dir, runtime=runtime, precision="fp32", workers=2)
    return StreamingSynthesizer(voice, config)


@pytest.mark.parametrize("lanes", ["one lane", "worker lanes"])
def test_concurrent_streams_equal_single_stream_output(synth, laned, lanes: str) -> None:
    synth = laned if lanes == "worker lanes" else synth
    alone = [synth.synthesize(text, QUIET) for text in TEXTS]
    before = list(synth.turns.turns_by_lane)
    together: dict[int, list[np.ndarray]] = {}

    def stream(index: int) -> None:
        units = synth.clauses(TEXTS[index])
        together[index] = [
            c.pcm for c in synth.stream_clauses(units, QUIET, cache_use="bypass", priority=CLIENT)
        ]

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(TEXTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index, expected in enumerate(alone):
        heard = np.concatenate(together[index]).astype(np.float64)
        assert len(heard) == len(expected), TEXTS[index]
        error = heard - expected
        snr = 10 * np.log10(np.sum(expected.astype(np.float64) ** 2) / max(np.sum(error**2), 1))
        assert snr >= 75.0 and np.max(np.abs(error)) <= 8, (TEXTS[index], snr)
    used = [now - then for now, then in zip(synth.turns.turns_by_lane, before, strict=True)]
    if lanes == "worker lanes":
        assert sum(used[1:]) > 0  # streams really ran side by side


def test_a_lone_streams_windows_are_decoded_in_parts_on_worker_lanes(laned, monkeypatch) -> None:
    """Alone, a stream holds the primary lane and its larger windows are cut into one part
    per worker lane, decoded side by side: the audio is the whole window's, to the
    decoder's exactness (each part carries the context its core needs)."""
    text = TEXTS[0]
    lanes_used: list[int] = []
    decode_on = laned.decoder._decode_on

    def counted(lane, z, sid):
        lanes_used.append(lane)
        return decode_on(lane, z, sid)

    monkeypatch.setattr(laned.decoder, "_decode_on", counted)
    in_parts = laned.synthesize(text, QUIET)
    assert {1, 2} <= set(lanes_used)  # both worker lanes decoded parts of one stream
    monkeypatch.setattr(laned.decoder, "split_parts", 0)
    lanes_used.clear()
    whole = laned.synthesize(text, QUIET)
    assert 2 not in lanes_used  # without parts only a narrow first turn leaves lane 0
    assert len(in_parts) == len(whole)
    error = in_parts.astype(np.float64) - whole
    snr = 10 * np.log10(np.sum(whole.astype(np.float64) ** 2) / max(np.sum(error**2), 1))
    assert snr >= 75.0 and np.max(np.abs(error)) <= 8, snr


@pytest.mark.parametrize(("lo", "hi", "length"), [(0, 300, 311), (11, 511, 522), (30, 160, 200)])
def test_window_parts_cover_its_kept_frames_each_with_context(laned, lo, hi, length) -> None:
    context = laned.decoder.context
    parts = laned.decoder.parts(lo, hi, length)
    assert len(parts) == laned.decoder.split_parts == 2
    assert parts[0][2] == lo and parts[-1][3] == hi
    for (_, _, _, kept_to), (_, _, kept_from, _) in itertools.pairwise(parts):
        assert kept_to == kept_from  # contiguous, no frame twice
    for start, stop, kept_from, kept_to in parts:
        assert 0 <= start <= kept_from < kept_to <= stop <= length
        # the context the window had on each side of this part's core
        assert kept_from - start == min(context, kept_from)
        assert stop - kept_to == min(context, length - kept_to)
    assert laned.decoder.parts(0, 100, 111) == []  # parts under SPLIT_MIN_CORE: whole


def _speak(synth: StreamingSynthesizer, units: list[str]) -> np.ndarray:
    return np.concatenate([c.pcm for c in synth.stream_clauses(units, QUIET, cache_use="bypass")])


def test_a_lone_streams_next_encoder_runs_beside_its_decoding(laned, monkeypatch) -> None:
    """Alone, a stream starts its next unit's encoder while it decodes this one, on a
    worker lane's frontend in the look-ahead thread; what it says is unchanged."""
    units = laned.clauses(TEXTS[1])
    assert len(units) == 2
    ran_in: list[str] = []
    prior = laned.prior

    def traced(*args, **kwargs):
        ran_in.append(threading.current_thread().name)
        return prior(*args, **kwargs)

    monkeypatch.setattr(laned, "prior", traced)
    ahead = _speak(laned, units)
    assert len(ran_in) == 2 and ran_in[1].startswith("frontend-ahead")
    monkeypatch.setattr(laned, "lookahead", None)
    ran_in.clear()
    in_turn = _speak(laned, units)
    assert len(ran_in) == 2 and not any(name.startswith("frontend-ahead") for name in ran_in)
    assert len(ahead) == len(in_turn)
    error = ahead.astype(np.float64) - in_turn
    snr = 10 * np.log10(np.sum(in_turn.astype(np.float64) ** 2) / max(np.sum(error**2), 1))
    assert snr >= 75.0, snr


def test_no_look_ahead_while_other_streams_decode(laned, monkeypatch) -> None:
    """Beside other streams the next unit's encoder waits for the stream's own turn: a
    third thread would slow the others' turns."""
    submitted: list[object] = []
    submit = laned.lookahead.submit

    def recorded(*args):
        submitted.append(run := submit(*args))
        return run

    monkeypatch.setattr(laned.lookahead, "submit", recorded)
    units = laned.clauses(TEXTS[1])
    _speak(laned, units)
    assert len(submitted) == 1  # alone: the second unit's encoder ran ahead
    submitted.clear()
    monkeypatch.setattr(laned.turns, "others", lambda pace: 1)
    _speak(laned, units)
    assert submitted == []


def test_an_ended_stream_no_longer_counts_as_decoding(laned) -> None:
    """A stream back from a turn counts as decoding for RECENT_S (it comes straight
    back), but not once it has ended: one starting just after it is alone at once."""
    turns = Turns(workers=2)
    first, second = Pace(), Pace()
    with turns.turn(first):
        pass
    assert turns.others(second) == 1
    turns.ended(first)
    assert turns.others(second) == 0
    with turns.turn(second) as lane:
        assert lane == PRIMARY
    laned.synthesize(TEXTS[0], QUIET)  # the synthesizer ends its streams
    assert laned.turns.others(Pace()) == 0


def test_a_stream_closed_early_drops_the_frontends_it_started_ahead(laned) -> None:
    """Frontends started ahead that have not begun are cancelled when the stream ends:
    they would hold the look-ahead thread from the next stream."""
    units = laned.clauses(" ".join(TEXTS))
    assert len(units) >= 3
    release = threading.Event()
    blocker = laned.lookahead.submit(release.wait, 5)  # the look-ahead thread is busy
    submitted: list = []
    submit = laned.lookahead.submit

    def recorded(*args):
        submitted.append(run := submit(*args))
        return run

    laned.lookahead.submit = recorded
    try:
        stream = laned.stream_clauses(units, QUIET, cache_use="bypass")
        next(stream)  # the first chunk: the next units' frontends are queued
        stream.close()
    finally:
        del laned.lookahead.submit
        release.set()
    blocker.result(5)
    assert len(submitted) == 2 and all(run.cancelled() for run in submitted)
