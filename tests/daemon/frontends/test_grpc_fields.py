"""The gRPC frontend's logic without a daemon: Riva-style voice names, request fields, the
status each refusal and outcome becomes, and the start's answer without the package."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest
from magpie_tts.daemon.config import Config, ConfigError
from magpie_tts.daemon.core.utterance import Event, Refused
from magpie_tts.daemon.frontends.grpc import fields, names, stubs
from magpie_tts.daemon.frontends.grpc.gate import Gate
from magpie_tts.daemon.frontends.grpc.server import GrpcFrontend
from magpie_tts.daemon.frontends.grpc.status import RpcError, failure_of, refusal
from magpie_tts.engine import VoiceSummary
from riva.client.proto import riva_tts_pb2 as rtts
from riva.client.proto.riva_audio_pb2 import AudioEncoding

JOE = VoiceSummary("en_US-joe-medium", Path("joe.onnx"), "en_US", 22050)
MANY = VoiceSummary("en_US-libritts-high", Path("l.onnx"), "en_US", 22050, ("p123", "p456"))
THORSTEN = VoiceSummary("de_DE-thorsten-medium", Path("t.onnx"), "de_DE", 22050)
CATALOGUE = [JOE, MANY, THORSTEN]
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def test_riva_style_names_follow_the_voice_list_shape() -> None:
    assert names.riva_names(JOE) == ["Magpie.EN-US.Joe"]
    assert names.riva_names(MANY) == ["Magpie.EN-US.Libritts.p123", "Magpie.EN-US.Libritts.p456"]
    assert names.short_name(VoiceSummary("second", Path("s.onnx"), "en_US", 22050)) == "Second"


@pytest.mark.parametrize(
    ("name", "language", "voice", "speaker"),
    [
        ("", "", None, None),
        ("", "en-US", None, None),
        ("", "de-DE", "de_DE-thorsten-medium", None),  # the first voice that speaks it
        ("magpie.en-us.joe", "en", None, None),  # the default voice: None
        ("Magpie.DE-DE.Thorsten", "de_DE", "de_DE-thorsten-medium", None),
        ("Magpie.EN-US.Libritts.p456", "en-US", "en_US-libritts-high", "p456"),
        ("Magpie.EN-US.Libritts", "", "en_US-libritts-high", None),
        ("en_US-libritts-high", "en-US", "en_US-libritts-high", None),
    ],
)
def test_names_resolve_to_the_voice_and_speaker(name, language, voice, speaker) -> None:
    choice = names.resolve(CATALOGUE, name, language)
    assert (choice.voice, choice.speaker) == (voice, speaker)


@pytest.mark.parametrize(
    ("name", "language", "words"),
    [
        ("English-US.Female-1", "", "unknown voice 'English-US.Female-1'"),
        ("../../etc/passwd", "", "voices are named as the catalogue lists them"),
        ("", "fr-FR", "no voice speaks 'fr-FR'"),
        ("Magpie.EN-US.Joe", "de-DE", "speaks en-US, not 'de-DE'"),
    ],
)
def test_unknown_names_and_languages_are_invalid(name, language, words) -> None:
    with pytest.raises(RpcError) as caught:
        names.resolve(CATALOGUE, name, language)
    assert caught.value.code == INVALID and words in str(caught.value)


def request(**change) -> rtts.SynthesizeSpeechRequest:  # type: ignore[no-untyped-def]
    asked = {"text": "Hi.", "language_code": "en-US", "sample_rate_hz": 22050, **change}
    asked.setdefault("encoding", AudioEncoding.LINEAR_PCM)
    return rtts.SynthesizeSpeechRequest(**asked)


def test_fields_pick_the_format_and_rate() -> None:
    pcm = fields.settings(request(), CATALOGUE)
    assert (pcm.fmt, pcm.rate) == ("pcm", 22050)
    assert fields.settings(request(sample_rate_hz=0), CATALOGUE).rate is None
    opus = fields.settings(request(encoding=AudioEncoding.OGGOPUS), CATALOGUE)
    assert (opus.fmt, opus.rate) == ("opus", 24000)  # the next rate Opus carries
    assert fields.settings(request(encoding=AudioEncoding.OGGOPUS, sample_rate_hz=16000), [JOE])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"encoding": AudioEncoding.ALAW}, "encoding ALAW"),
        ({"encoding": AudioEncoding.ENCODING_UNSPECIFIED}, "encoding ENCODING_UNSPECIFIED"),
        ({"encoding": 99}, "encoding 99"),
        ({"sample_rate_hz": 7999}, "sample_rate_hz"),
        ({"sample_rate_hz": -1}, "sample_rate_hz"),
        ({"custom_configuration": {"speed": "2"}}, "custom_configuration"),
        ({"zero_shot_data": rtts.ZeroShotData(quality=20)}, "zero_shot_data"),
    ],
)
def test_fields_refused_say_which(change, words) -> None:
    with pytest.raises(RpcError) as caught:
        fields.settings(request(**change), CATALOGUE)
    assert caught.value.code == INVALID and words in str(caught.value)


def test_an_id_over_128_characters_is_refused() -> None:
    asked = request()
    asked.id.value = "x" * 129
    with pytest.raises(RpcError, match=r"id\.value"):
        fields.settings(asked, CATALOGUE)


def test_refusals_and_outcomes_become_status_codes() -> None:
    busy = refusal(Refused("too many streams at once (limit 8)", code="busy", retry_after=2.5))
    assert busy.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert busy.trailers() == (("retry-after", "3"),)
    assert refusal(Refused("text is empty")).code == INVALID
    assert refusal(Refused("daemon is shutting down", code="shutting-down")).code == (
        grpc.StatusCode.UNAVAILABLE
    )
    assert failure_of(Event("finished", {"rtf": 0.2})) is None
    outcomes = [
        (Event("finished", {"error": "stream ended without final"}), "DEADLINE_EXCEEDED"),
        (Event("stopped", {"reason": "shutdown"}), "UNAVAILABLE"),
        (Event("stopped", {"reason": "client gone"}), "ABORTED"),
        (Event("stopped", {"reason": "client disconnected"}), "CANCELLED"),
        (Event("error", {"error": "nothing speakable in the text"}), "INVALID_ARGUMENT"),
        (
            Event("error", {"error": "unknown voice 'x'", "code": "unknown-voice"}),
            "INVALID_ARGUMENT",
        ),
        (Event("error", {"error": "internal error: boom"}), "INTERNAL"),
    ]
    for event, code in outcomes:
        failure = failure_of(event)
        assert failure is not None and failure.code.name == code, event


def test_enabled_without_the_package_fails_the_start_with_the_hint(monkeypatch) -> None:
    stubs.stubs.cache_clear()
    monkeypatch.setitem(sys.modules, "riva.client.proto", None)  # import fails
    try:
        with pytest.raises(ConfigError, match=r"magpie-tts\[grpc\]"):
            GrpcFrontend(Config(), host=None)  # type: ignore[arg-type]
    finally:
        stubs.stubs.cache_clear()


class Context:
    """What the gate reads of a grpc.aio ServicerContext."""

    def __init__(
        self, metadata: tuple[tuple[str, str], ...] = (), peer: str = "ipv4:10.0.0.5:4711"
    ):
        self.metadata = metadata
        self._peer = peer

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def gate_with_key(tmp_path: Path, per_minute: int = 120) -> Gate:
    (tmp_path / "key").write_text("s3cret\n")
    return Gate(
        Config(http={"api_key_file": tmp_path / "key"}, grpc={"rate_per_minute": per_minute})
    )


def test_the_key_as_bearer_or_x_api_key(tmp_path) -> None:
    gate = gate_with_key(tmp_path)
    gate.authenticate(Context((("authorization", "Bearer s3cret"),)))
    gate.authenticate(Context((("x-api-key", "s3cret"),)))
    for metadata in ((), (("authorization", "Bearer nope"),), (("authorization", "s3cret"),)):
        with pytest.raises(RpcError) as caught:
            gate.authenticate(Context(metadata))
        assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_failed_keys_lock_the_address_out_and_not_another(tmp_path) -> None:
    gate = gate_with_key(tmp_path)
    for _ in range(10):
        with pytest.raises(RpcError):
            gate.authenticate(Context())
    with pytest.raises(RpcError) as caught:  # the right key, unchecked now
        gate.authenticate(Context((("x-api-key", "s3cret"),)))
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    gate.authenticate(Context((("x-api-key", "s3cret"),), peer="ipv4:10.0.0.6:1"))


def test_each_address_has_its_budget(tmp_path) -> None:
    gate = gate_with_key(tmp_path, per_minute=2)
    for _ in range(2):
        with gate.budget(Context(peer="ipv6:[::1]:5000")):
            pass
    with pytest.raises(RpcError) as caught, gate.budget(Context(peer="ipv6:[::1]:5001")):
        pass
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.trailers()[0][0] == "retry-after"
    with gate.budget(Context(peer="ipv4:127.0.0.1:5000")):
        pass


def test_word_offsets_and_a_dictionary_are_taken_into_the_settings() -> None:
    asked = fields.settings(
        request(enable_word_time_offsets=True, custom_dictionary="apples  bənˈænəz"), CATALOGUE
    )
    assert asked.word_offsets and asked.custom_dictionary == "apples  bənˈænəz"
    plain = fields.settings(request(), CATALOGUE)
    assert not plain.word_offsets and plain.custom_dictionary == ""
