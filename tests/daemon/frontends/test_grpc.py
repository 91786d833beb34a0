"""The Riva TTS gRPC API end to end, driven by NVIDIA's own client (`nvidia-riva-client`:
`riva.client.Auth` + `SpeechSynthesisService`, and its generated stub) against one daemon
for the module: whole audio in LINEAR_PCM at 22.05 and 16 kHz and in OGGOPUS, text
streamed in with audio coming back before the text ends, the voice list, and each refusal
as its status code."""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Iterator

import av
import grpc
import httpx
import numpy as np
import pytest
import riva.client
from riva.client.proto import riva_tts_pb2 as rtts
from riva.client.proto import riva_tts_pb2_grpc as rtts_grpc
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from ...harness import free_port, make_http_daemon

KEY = "grpc-key"
SENTENCE = "The kitchen lights are off and the oven is cold."
PIECES = [
    "The kitch",
    "en lights are ",
    "off, and ",
    "the oven",
    " is cold. The back",
    " door",
    " is locked.",
]
LONG = " ".join(["The weather today is mild with a light breeze from the west."] * 12)
WAIT_S = 60.0  # how long a step may take on a loaded machine before the test fails


@pytest.fixture(scope="module")
def riva_daemon(tmp_path_factory, broker, prepared_state):
    folder = tmp_path_factory.mktemp("grpc")
    (folder / "api-key").write_text(KEY + "\n")
    port = free_port()
    proc = make_http_daemon(  # HTTP for /metrics: what the daemon did with a call
        folder,
        broker.port,
        prepared_state,
        grpc__enabled="true",
        grpc__port=str(port),
        grpc__rate_per_minute="1000",
        http__api_key_file=str(folder / "api-key"),
        limits__rate_per_minute="1000",
        limits__max_waiting_streams="1",  # a second stream waiting for text is refused
        limits__client_stall_s="60",  # a cancel must stop synthesis, not the stall rule
    ).start()
    proc.uri = f"127.0.0.1:{port}"
    proc.metrics_url = f"{proc.url}/metrics"
    yield proc
    proc.stop()


def service(daemon, key: str | None = KEY) -> riva.client.SpeechSynthesisService:
    metadata = [["authorization", f"Bearer {key}"]] if key else None
    return riva.client.SpeechSynthesisService(
        riva.client.Auth(uri=daemon.uri, metadata_args=metadata)
    )


@pytest.fixture
def tts(riva_daemon) -> riva.client.SpeechSynthesisService:
    return service(riva_daemon)


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def metric(daemon, name: str, **labels: str) -> float:
    text = httpx.get(daemon.metrics_url, headers={"Authorization": f"Bearer {KEY}"}).text
    shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + shown + '}') if labels else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def wait_for(predicate, what: str, wait_s: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + wait_s
    while not predicate():
        assert time.monotonic() < deadline, f"waited {wait_s:g} s for {what}"
        time.sleep(0.05)


class Pieces(list):  # type: ignore[type-arg]
    """Text pieces yielded one at a time, each when `gate(i)` allows. A list to the
    client: its 2.28.0 `synthesize_online` fails on a plain generator (its
    `isinstance(text, Iterable[str])` raises TypeError), but iterates a list lazily."""

    def __init__(self, pieces: list[str], hold: dict[int, threading.Event]) -> None:
        super().__init__(pieces)
        self.hold = hold  # piece index → wait for this before sending it

    def __iter__(self) -> Iterator[str]:
        for index, piece in enumerate(list.__iter__(self)):
            if index in self.hold:
                assert self.hold[index].wait(WAIT_S), f"piece {index} held too long"
            yield piece


def test_synthesize_linear_pcm_at_22050_and_16000(tts, recognizer) -> None:
    whole = tts.synthesize(SENTENCE, language_code="en-US", sample_rate_hz=22050)
    audio = pcm(whole.audio)
    assert len(audio) > 22050  # over a second of speech
    error, heard = recognizer.wer_pcm(audio, 22050, SENTENCE)
    assert error <= 0.12, heard
    assert whole.meta.text == SENTENCE
    low = pcm(tts.synthesize(SENTENCE, sample_rate_hz=16000).audio)
    assert abs(len(low) / 16000 - len(audio) / 22050) < 0.05  # the same speech, resampled
    numbers = tts.synthesize("It is 21 degrees at 7 pm.", sample_rate_hz=16000)
    assert "twenty" in numbers.meta.processed_text.lower()  # normalized, as spoken


def test_word_offsets_one_per_word_in_order_inside_the_audio(tts) -> None:
    whole = tts.synthesize(SENTENCE, sample_rate_hz=16000, enable_word_time_offsets=True)
    duration_ms = len(pcm(whole.audio)) / 16000 * 1000
    words = list(whole.meta.words)
    spoken = [w.strip(".,") for w in SENTENCE.lower().split()]
    assert [w.word.lower().strip(".,") for w in words] == spoken
    starts = [w.start_time for w in words]
    assert starts == sorted(starts) and all(w.start_time < w.end_time for w in words)
    assert starts[0] >= 0 and words[-1].end_time <= duration_ms + 1
    online = tts.synthesize_online(PIECES, sample_rate_hz=16000, enable_word_time_offsets=True)
    streamed = [w for response in online for w in response.meta.words]
    assert len(streamed) == len("".join(PIECES).split())
    assert [w.start_time for w in streamed] == sorted(w.start_time for w in streamed)
    assert not tts.synthesize(SENTENCE).meta.words  # only when asked


def test_a_custom_dictionary_entry_is_heard_as_its_replacement(tts, recognizer) -> None:
    """The client takes a dict and sends Riva's `word  IPA` entries, comma-separated."""
    bananas = {"apples": "bənˈænəz"}
    reply = tts.synthesize("Put the apples in the basket.", custom_dictionary=bananas)
    error, heard = recognizer.wer_pcm(pcm(reply.audio), 22050, "put the bananas in the basket")
    assert error <= 0.2, heard
    with pytest.raises(grpc.RpcError) as refused:
        tts.synthesize("Hello.", custom_dictionary={"hello": "☃"})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "custom_dictionary" in refused.value.details()


def test_synthesize_oggopus_decodes_and_the_id_is_echoed(riva_daemon) -> None:
    stub = rtts_grpc.RivaSpeechSynthesisStub(grpc.insecure_channel(riva_daemon.uri))
    request = rtts.SynthesizeSpeechRequest(
        text=SENTENCE, language_code="en-US", encoding=AudioEncoding.OGGOPUS, sample_rate_hz=24000
    )
    request.id.value = "call-7"
    reply = stub.Synthesize(request, metadata=[("x-api-key", KEY)])
    assert reply.audio[:4] == b"OggS" and reply.id.value == "call-7"
    with av.open(io.BytesIO(reply.audio)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    assert len(samples) / stream.rate > 1.0 and np.abs(samples).max() > 0.05


def test_synthesize_online_speaks_while_the_pieces_still_come(tts, recognizer) -> None:
    first_audio = threading.Event()
    # the fifth piece waits for audio: it comes after the first clause, before the end
    pieces = Pieces(PIECES, {4: first_audio})
    chunks = []
    for response in tts.synthesize_online(pieces, sample_rate_hz=16000):
        if response.audio:
            first_audio.set()
        chunks.append(response)
    assert len(chunks) > 2
    assert "".join(PIECES) == chunks[-1].meta.text and chunks[-1].meta.processed_text
    audio = pcm(b"".join(c.audio for c in chunks))
    error, heard = recognizer.wer_pcm(audio, 16000, "".join(PIECES))
    assert error <= 0.12, heard


def test_a_generator_of_requests_on_the_stub_streams_too(riva_daemon) -> None:
    stub = rtts_grpc.RivaSpeechSynthesisStub(grpc.insecure_channel(riva_daemon.uri))

    def requests() -> Iterator[rtts.SynthesizeSpeechRequest]:
        for piece in PIECES:
            yield rtts.SynthesizeSpeechRequest(
                text=piece, language_code="en-US", encoding=AudioEncoding.OGGOPUS
            )

    replies = list(stub.SynthesizeOnline(requests(), metadata=[("x-api-key", KEY)]))
    ogg = b"".join(r.audio for r in replies)
    with av.open(io.BytesIO(ogg)) as container:
        assert sum(f.samples for f in container.decode(audio=0)) > 24000  # > 1 s at 24 kHz


def test_the_voice_list_names_the_voice_riva_style(tts) -> None:
    config = tts.stub.GetRivaSynthesisConfig(
        rtts.RivaSynthesisConfigRequest(), metadata=tts.auth.get_auth_metadata()
    )
    models = {m.model_name: dict(m.parameters) for m in config.model_config}
    joe = models["en_US-joe-medium"]
    assert joe["language_code"] == "en-US" and joe["sample_rate"] == "22050"
    # as NVIDIA's talk.py --list-voices builds names: voice_name + "." + subvoice
    names = [f"{joe['voice_name']}.{s.split(':')[0]}" for s in joe["subvoices"].split(",")]
    assert names == ["Magpie.EN-US.Joe"]
    spoken = tts.synthesize("Hello.", voice_name="magpie.en-us.joe", sample_rate_hz=16000)
    assert len(spoken.audio) > 3200


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"voice_name": "English-US.Female-1"}, "unknown voice"),
        ({"text": "   "}, "text is empty"),
        ({"language_code": "de-DE"}, "no voice speaks 'de-DE'"),
        ({"language_code": "de-DE", "voice_name": "Magpie.EN-US.Joe"}, "not 'de-DE'"),
        ({"encoding": AudioEncoding.FLAC}, "encoding FLAC"),
        ({"sample_rate_hz": 96000}, "sample_rate_hz"),
        ({"text": "Hello <b>there</b>."}, "markup"),
    ],
)
def test_bad_fields_are_invalid_argument(tts, change, words) -> None:
    asked = {"text": "Hello.", "language_code": "en-US", "sample_rate_hz": 22050, **change}
    with pytest.raises(grpc.RpcError) as caught:
        tts.synthesize(**asked)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()


def test_a_streamed_piece_that_cannot_be_spoken_fails_the_call(tts) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(tts.synthesize_online(["Hello there. ", "And <b>bold", "</b> text."]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "markup" in caught.value.details()


def test_without_the_key_unauthenticated(riva_daemon) -> None:
    for key in (None, "wrong"):
        with pytest.raises(grpc.RpcError) as caught:
            service(riva_daemon, key).synthesize("Hello.")
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_stream_past_the_limit_is_resource_exhausted(riva_daemon, tts) -> None:
    release = threading.Event()
    waiting = Pieces(["The front door", " is locked."], {1: release})
    results: list[int] = []
    first = threading.Thread(
        target=lambda: results.append(len(list(tts.synthesize_online(waiting)))), daemon=True
    )
    first.start()
    try:  # it waits for its text, holding the one place a waiting stream has
        wait_for(lambda: metric(riva_daemon, "magpie_active_streams") == 1, "the first stream")
        with pytest.raises(grpc.RpcError) as caught:
            list(tts.synthesize_online(["Hello."]))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many streams" in caught.value.details()
        assert ("retry-after", "1") in caught.value.trailing_metadata()
    finally:
        release.set()
        first.join(WAIT_S)
    assert results and results[0] > 1  # the first stream was spoken to its end


def test_a_cancelled_stream_stops_its_synthesis(riva_daemon, tts) -> None:
    before = metric(riva_daemon, "magpie_utterances_total", frontend="grpc", outcome="stopped")
    responses = tts.synthesize_online(LONG)
    assert next(responses).audio
    responses.cancel()
    # stopped by the cancel, not by the stall rule (60 s): the client reads nothing more
    wait_for(
        lambda: (
            metric(riva_daemon, "magpie_utterances_total", frontend="grpc", outcome="stopped")
            == before + 1
        ),
        "the stop",
        wait_s=20,
    )
    assert metric(riva_daemon, "magpie_active_streams") == 0
    assert tts.synthesize("Still here.").audio  # and it serves on
