"""The daemon core's lifecycle with fakes (milliseconds): one terminal event per accepted
request, pre-emption and resume, stop by id, streams, ids, limits."""

from __future__ import annotations

import time

import pytest
from magpie_tts.daemon.core.core import Core, CoreLimits
from magpie_tts.daemon.core.utterance import TERMINAL, Ask, Refused
from magpie_tts.engine.text.policy import TextPolicy

from ..fakes import FakePlayer, FakeRegistry, FakeSynth, RecordingSink

SENTENCES = "One two three. Four five six. Seven eight nine. Ten eleven twelve."


@pytest.fixture
def parts():
    synth = FakeSynth()
    player = FakePlayer(chunk_s=0.05)
    sink = RecordingSink()
    made: list[Core] = []

    def build(**limits) -> Core:
        core = Core(
            FakeRegistry(synth),
            player,
            TextPolicy(first_clause_words=0),
            CoreLimits(**{"max_queue": 8, "rate_per_minute": 100, "stream_idle_s": 5, **limits}),
        )
        core.start()
        made.append(core)
        return core

    yield build, synth, player, sink
    for core in made:
        core.shutdown()


def terminals(sink: RecordingSink, request_id: str) -> list[str]:
    return [n for n in sink.names(request_id) if n in TERMINAL]


def test_events_in_order_and_one_terminal(parts) -> None:
    build, synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="a", text="Hello there."), sink)
    sink.wait("a", "finished")
    assert sink.names("a") == ["queued", "started", "finished"]
    assert sink.fields("a", "finished")["rtf"] is not None
    assert synth.spoken == ["Hello there."]


def test_live_duplicate_refused_and_ids_reusable_after_for_say_and_stream(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="x", text=SENTENCES), sink)
    with pytest.raises(Refused, match="already queued"):
        core.submit(Ask(id="x", text="Again."), sink)
    with pytest.raises(Refused, match="not a stream"):
        core.feed_stream(Ask(id="x", source="stream"), "More", False, sink)
    sink.wait("x", "finished")
    core.feed_stream(Ask(id="x", source="stream"), "Now a stream.", True, sink)  # same rule
    time.sleep(0.3)
    assert terminals(sink, "x") == ["finished", "finished"]


def test_stop_by_id_and_unknown_id(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="busy", text=SENTENCES), sink)
    core.submit(Ask(id="gone", text="Never heard."), sink)
    assert core.stop("mqtt", "gone") == 1
    assert core.stop("mqtt", "nobody") == 0
    sink.wait("busy", "finished")
    assert sink.names("gone") == ["queued", "stopped"]
    assert sink.fields("gone", "stopped")["played"] is False


def test_alert_preempts_and_the_interrupted_utterance_resumes_at_its_unit(parts) -> None:
    build, synth, _player, sink = parts
    core = build()
    ask = Ask(id="long", text=SENTENCES, volume=0.7, speed=1.2, priority="low", cacheable=True)
    core.submit(ask, sink)
    while len(synth.spoken) < 2:  # the second unit is playing
        time.sleep(0.005)
    core.submit(Ask(id="alert", text="Smoke alarm!", priority="alert"), sink)
    sink.wait("long", "finished")
    assert sink.names("long") == ["queued", "started", "interrupted", "started", "finished"]
    resume_at = sink.fields("long", "interrupted")["resume_at_unit"]
    assert resume_at == 1  # the unit being heard, not the start
    assert synth.spoken[:2] == ["One two three.", "Four five six."]
    assert synth.spoken[2] == "Smoke alarm!"
    assert synth.spoken[3:] == ["Four five six.", "Seven eight nine.", "Ten eleven twelve."]
    # the resumed utterance is the same ask: every field survives
    assert core.stats.utterances == 2


def test_a_stop_wins_over_a_pending_resume(parts) -> None:
    build, synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="long", text=SENTENCES), sink)
    sink.wait("long", "started")
    core.submit(Ask(id="alert", text="Smoke alarm!", priority="alert"), sink)
    core.stop("mqtt")
    time.sleep(0.4)
    assert terminals(sink, "long") == ["stopped"]
    assert "Ten eleven twelve." not in synth.spoken


def test_stop_after_resume_was_queued_stops_it(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="long", text=SENTENCES), sink)
    sink.wait("long", "started")
    core.submit(Ask(id="alert", text="Smoke alarm, leave now!", priority="alert"), sink)
    sink.wait("long", "interrupted")
    core.stop("mqtt")
    time.sleep(0.3)
    assert terminals(sink, "long") == ["stopped"]
    assert terminals(sink, "alert") == ["stopped"]


def test_alert_over_a_stream_resumes_the_stream(parts) -> None:
    build, synth, _player, sink = parts
    core = build()
    stream = Ask(id="s", source="stream")
    core.feed_stream(stream, "First part here. Second part", False, sink)
    sink.wait("s", "started")
    core.submit(Ask(id="alert", text="Doorbell!", priority="alert"), sink)
    sink.wait("s", "interrupted")
    core.feed_stream(stream, " comes now. Third part.", True, sink)
    sink.wait("s", "finished")
    assert "Second part comes now." in synth.spoken and "Third part." in synth.spoken
    assert terminals(sink, "s") == ["finished"]


def test_stream_idle_means_time_since_last_piece(parts) -> None:
    build, _synth, _player, sink = parts
    core = build(stream_idle_s=0.3)
    stream = Ask(id="slow", source="stream")
    core.feed_stream(stream, "Hello,", False, sink)
    for word in " this reply comes one word at a time".split(" "):
        time.sleep(0.1)  # well under the idle limit, for longer than it in total
        core.feed_stream(stream, f" {word}", False, sink)
    core.feed_stream(stream, ".", True, sink)
    sink.wait("slow", "finished")
    assert "error" not in sink.fields("slow", "finished")
    # and a sender that goes quiet: spoken, concluded, and told
    core.feed_stream(Ask(id="quiet", source="stream"), "Something, and then", False, sink)
    sink.wait("quiet", "finished")
    assert "without final" in sink.fields("quiet", "finished")["error"]


def test_streams_idle_while_queued_do_not_hold_the_speaker(parts) -> None:
    build, synth, _player, sink = parts
    core = build(stream_idle_s=0.2, max_queue=50)
    core.submit(Ask(id="busy", text=SENTENCES), sink)
    for index in range(20):
        core.feed_stream(Ask(id=f"ab{index}", source="stream"), "Abandoned reply,", False, sink)
    started = time.monotonic()
    core.submit(Ask(id="after", text="Still here."), sink)
    sink.wait("after", "finished")
    assert time.monotonic() - started < 2.0  # not 20 × the idle limit
    for index in range(20):
        assert terminals(sink, f"ab{index}") == ["error"]
    assert "Abandoned reply," not in synth.spoken


def test_refused_stream_pieces_are_all_answered(parts) -> None:
    build, _synth, _player, sink = parts
    core = build(max_queue=1)
    core.submit(Ask(id="busy", text=SENTENCES), sink)
    sink.wait("busy", "started")
    core.submit(Ask(id="waiting", text="Wait."), sink)
    answers = []
    for piece, final in (("Hello ", False), ("there ", False), ("friend.", True)):
        try:
            core.feed_stream(Ask(id="full", source="stream"), piece, final, sink)
            answers.append("accepted")
        except Refused as exc:
            answers.append(str(exc))
    assert all("queue full" in a for a in answers)  # each piece gets its own answer
    sink.wait("waiting", "finished")


def test_rate_budget_is_not_used_by_refusals(parts) -> None:
    build, _synth, _player, sink = parts
    core = build(max_queue=1, rate_per_minute=3)
    core.submit(Ask(id="r0", text=SENTENCES), sink)
    sink.wait("r0", "started")
    core.submit(Ask(id="r1", text="One."), sink)
    for index in range(5):
        with pytest.raises(Refused, match="queue full"):
            core.submit(Ask(id=f"full{index}", text="Two."), sink)
    sink.wait("r1", "finished")
    core.submit(Ask(id="r2", text="Three."), sink)  # the third accepted: within budget
    with pytest.raises(Refused, match="rate limit") as refused:
        core.submit(Ask(id="r3", text="Four."), sink)
    assert 50 < refused.value.retry_after <= 60  # when the first of the three leaves


def test_rate_limit_says_when_one_more_fits() -> None:
    from magpie_tts.daemon.core.rate import RateLimit

    now = [1000.0]
    rate = RateLimit(2, clock=lambda: now[0])
    assert rate.retry_after("a") == 0
    rate.take("a")
    now[0] += 10
    rate.take("a")
    assert rate.retry_after("a") == pytest.approx(50) and rate.retry_after("b") == 0
    now[0] += 50.5  # the first left the window
    assert rate.retry_after("a") == 0 and rate.allows("a")


def test_punctuation_only_stream_is_an_error(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.feed_stream(Ask(id="dots", source="stream"), "... !!! ...", True, sink)
    sink.wait("dots", "error")
    assert sink.names("dots") == ["queued", "error"]


def test_bad_voice_and_text_refused_before_queueing(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    for ask, words in (
        (Ask(id="v", text="Hi.", voice="nope"), "unknown voice"),
        (Ask(id="s", text="Hi.", speaker=7), "unknown speaker"),
        (Ask(id="m", text="<b>Hi</b>"), "markup"),
        (Ask(id="e", text="🙂"), "nothing speakable"),
    ):
        with pytest.raises(Refused, match=words):
            core.submit(ask, sink)
    assert sink.events == []


def test_shutdown_concludes_everything(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="now", text=SENTENCES), sink)
    core.submit(Ask(id="later", text="Later."), sink)
    sink.wait("now", "started")
    core.shutdown()
    assert terminals(sink, "now") == ["stopped"] and terminals(sink, "later") == ["stopped"]
    with pytest.raises(Refused, match="shutting down"):
        core.submit(Ask(id="late", text="Too late."), sink)


class ClientAudio:
    """A client connection as the core sees it: takes PCM, may be slow or go away."""

    def __init__(self, accept: int = 10**6, delay_s: float = 0.0) -> None:
        self.accept = accept  # chunks it takes before it is gone
        self.delay_s = delay_s
        self.chunks = 0

    def write(self, pcm, sample_rate: int) -> bool:
        if self.chunks >= self.accept:
            return False
        time.sleep(self.delay_s)
        self.chunks += 1
        return True


def test_client_bound_utterances_bypass_the_speaker_queue(parts) -> None:
    build, _synth, player, sink = parts
    core = build()
    core.submit(Ask(id="speaker", text=SENTENCES), sink)  # holds the speaker
    sink.wait("speaker", "started")
    out = ClientAudio()
    core.submit(Ask(id="client", text=SENTENCES, source="wyoming"), sink, audio_out=out)
    sink.wait("client", "finished")
    assert sink.names("client") == ["queued", "started", "finished"]
    assert "finished" not in sink.names("speaker")  # it did not wait for the speaker
    assert out.chunks == 4 and all(unit is not None for unit, _ in player.played)
    assert core.client_stats.summary()["utterances"] == 1
    assert core.stats.summary()["utterances"] == 0


def test_client_gone_stops_its_utterance_once(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    core.submit(Ask(id="c", text=SENTENCES), sink, audio_out=ClientAudio(accept=1))
    sink.wait("c", "stopped")
    assert terminals(sink, "c") == ["stopped"]
    assert sink.fields("c", "stopped")["reason"] == "client gone"
    assert core.active_streams == 0


def test_client_streams_are_bounded_stoppable_and_shut_down(parts) -> None:
    build, _synth, _player, sink = parts
    core = build(max_streams=2)
    slow = [ClientAudio(delay_s=0.2), ClientAudio(delay_s=0.2)]
    held = [
        core.submit(Ask(id=f"s{index}", text=SENTENCES), sink, audio_out=out)
        for index, out in enumerate(slow)
    ]
    with pytest.raises(Refused, match="too many streams"):
        core.submit(Ask(id="s2", text=SENTENCES), sink, audio_out=ClientAudio())
    core.cancel(held[0], "client gone")  # its connection ends it (a stop cannot: below)
    sink.wait("s0", "stopped")
    stream = core.feed_stream(Ask(id="s3"), "Half a", False, sink, audio_out=ClientAudio())
    core.shutdown()
    assert terminals(sink, "s1") == ["stopped"] and terminals(sink, "s3") == ["stopped"]
    assert stream.outcome is not None and core.active_streams == 0


def test_stop_reaches_only_the_speaker_and_ids_live_per_frontend(parts) -> None:
    """A stop (all, or by id) never ends a client's stream; a client-chosen id lives in
    its frontend's namespace, so one frontend cannot squat or stop another's."""
    build, _synth, _player, sink = parts
    core = build()
    out = ClientAudio(delay_s=0.05)
    client = core.submit(Ask(id="c", text=SENTENCES, source="wyoming"), sink, audio_out=out)
    core.submit(Ask(id="kitchen", text=SENTENCES), sink)  # MQTT's "kitchen"
    core.submit(Ask(id="kitchen", text="Hello.", source="http-say"), sink)  # HTTP's own
    assert core.stop("wyoming", "c") == 0  # a client stream is its connection's alone
    assert core.stop("http", "kitchen") == 1  # HTTP's, not MQTT's
    assert core.stop("mqtt") == 1  # all on the speaker: MQTT's kitchen
    sink.wait("c", "finished")
    assert terminals(sink, "kitchen") == ["stopped", "stopped"]
    assert client.outcome is not None and client.outcome.name == "finished"


def test_daemon_made_ids_are_random(parts) -> None:
    build, _synth, _player, _sink = parts
    core = build()
    first, second = (core.say_local("Okay.").id for _ in range(2))
    assert first != second and len(first) == len("local-") + 16


def test_each_frontend_has_its_own_rate_budget(parts) -> None:
    build, _synth, _player, sink = parts
    core = build(rate_per_minute=2)
    for index in range(2):
        core.submit(Ask(id=f"h{index}", text="Hi.", source="http"), sink, audio_out=ClientAudio())
    with pytest.raises(Refused, match="rate limit") as refused:
        core.submit(Ask(id="h2", text="Hi.", source="http"), sink, audio_out=ClientAudio())
    assert 0 < refused.value.retry_after <= 60
    core.submit(Ask(id="m", text="Kitchen timer done."), sink)  # MQTT's budget is its own
    sink.wait("m", "finished")


def test_a_stream_waiting_for_text_holds_no_slot(parts) -> None:
    """Slots are for making audio: a stream that waits for text keeps nobody out, and
    takes a slot when its text comes (waiting, if need be, for one to free)."""
    build, _synth, _player, sink = parts
    core = build(max_streams=1, max_waiting_streams=2)
    waiting = [
        core.feed_stream(Ask(id=f"w{i}", source="http-stream"), "T", False, sink, ClientAudio())
        for i in range(2)
    ]
    with pytest.raises(Refused, match="waiting for text"):
        core.feed_stream(Ask(id="w2", source="http-stream"), "", False, sink, ClientAudio())
    core.feed_stream(Ask(id="wy", source="wyoming-stream"), "", False, sink, ClientAudio())
    busy = ClientAudio(delay_s=0.1)
    core.submit(Ask(id="one", text=SENTENCES, source="http"), sink, audio_out=busy)
    with pytest.raises(Refused, match="too many streams at once"):
        core.submit(Ask(id="two", text="Hi.", source="http"), sink, audio_out=ClientAudio())
    core.feed(waiting[0], "he end.", True)  # has a unit now: waits for the one slot
    sink.wait("w0", "finished")
    assert sink.names("one")[-1] == "finished"  # it had to wait for the slot
    core.cancel(waiting[1], "client gone")
    sink.wait("w1", "stopped")


def test_feed_refuses_a_bad_piece_and_leaves_the_stream_to_its_holder(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    stream = core.feed_stream(
        Ask(id="s", source="http-stream"), "Hello", False, sink, ClientAudio()
    )
    for bad, words in (("<b>x</b>", "markup"), ("\x07", "control"), ("x" * 20_000, "too long")):
        with pytest.raises(Refused, match=words):
            core.feed(stream, bad, False)
    assert stream.stream is not None and not stream.stream.closed
    core.feed(stream, " there.", True)
    sink.wait("s", "finished")
    with pytest.raises(Refused, match="has ended"):
        core.feed(stream, "More.", False)  # never opens another (nor one on the speaker)


def test_a_refusal_code_is_not_picked_by_the_words_of_a_client_id(parts) -> None:
    build, _synth, _player, sink = parts
    core = build()
    tricky = "speaker-too long-empty-markup"  # words the codes of other refusals are read from
    core.submit(Ask(id=tricky, text=SENTENCES), sink)
    with pytest.raises(Refused) as again:
        core.submit(Ask(id=tricky, text="Again."), sink)
    assert again.value.code == "duplicate-id"
    with pytest.raises(Refused) as stream:
        core.feed_stream(Ask(id=tricky, source="stream"), "More.", False, sink)
    assert stream.value.code == "duplicate-id"
