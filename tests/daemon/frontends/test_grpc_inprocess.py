"""The gRPC frontend in-process, on a core with fakes (milliseconds): its server started
and stopped as the service does, calls through NVIDIA's generated stub, a cancelled
stream that stops its synthesis, and a port in use that fails the start."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.frontends.grpc.server import GrpcFrontend
from riva.client.proto import riva_tts_pb2 as rtts
from riva.client.proto import riva_tts_pb2_grpc as rtts_grpc

from ...fakes import FakeHost, FakeSynth, fake_core
from ...harness import free_port


@pytest.fixture
def serve():  # type: ignore[no-untyped-def]
    started: list[tuple[GrpcFrontend, Any]] = []

    def start(
        synth: FakeSynth | None = None, max_file_s: float = 600.0
    ) -> tuple[Any, FakeSynth, Any, int]:
        synth = synth or FakeSynth()
        core = fake_core(synth)
        port = free_port()
        # a stall cut-off (60 s) far past the wait below: only the cancel ends it in time
        config = Config(
            grpc={"port": port},
            limits={"client_stall_s": 60},
            http={"max_file_audio_s": max_file_s},
        )
        frontend = GrpcFrontend(config, FakeHost(core))
        frontend.start()
        started.append((frontend, core))
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        return rtts_grpc.RivaSpeechSynthesisStub(channel), synth, core, port

    yield start
    for frontend, core in started:
        core.shutdown()
        frontend.stop()


def ask(text: str) -> rtts.SynthesizeSpeechRequest:
    return rtts.SynthesizeSpeechRequest(text=text, language_code="en-US", encoding=1)


def test_synthesize_online_and_the_voice_list(serve) -> None:
    stub, synth, _, _ = serve()
    replies = list(stub.SynthesizeOnline(iter([ask("One. "), ask("Two. "), ask("Three.")])))
    assert sum(len(r.audio) for r in replies) == 3 * 50 * 2  # a 50-sample chunk a unit
    assert replies[-1].meta.text == "One. Two. Three." and synth.spoken == [
        "One.",
        "Two.",
        "Three.",
    ]
    config = stub.GetRivaSynthesisConfig(rtts.RivaSynthesisConfigRequest())
    assert config.model_config[0].parameters["subvoices"] == "alice:0"


def test_synthesize_past_the_whole_audio_limit_is_invalid(serve) -> None:
    """Synthesize answers with the whole audio, at most http.max_file_audio_s of it (the
    fake makes 50 ms a unit): past it INVALID_ARGUMENT, naming the streamed call."""
    stub, _, _, _ = serve(max_file_s=0.12)
    assert len(stub.Synthesize(ask("One. Two.")).audio) == 2 * 50 * 2
    with pytest.raises(grpc.RpcError) as caught:
        stub.Synthesize(ask("One. Two. Three."))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "SynthesizeOnline" in caught.value.details()


def test_a_cancelled_stream_stops_its_synthesis_at_once(serve) -> None:
    stub, synth, core, _ = serve(FakeSynth(unit_delay=0.05))
    responses = stub.SynthesizeOnline(iter([ask("Word. " * 200)]))
    assert next(responses).audio
    responses.cancel()
    deadline = time.monotonic() + 10
    while core.active_streams and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core.active_streams == 0 and len(synth.spoken) < 50  # of 200 units
    assert core.client_stats.stopped == 1


def test_a_port_in_use_fails_the_start(serve) -> None:
    _, _, core, port = serve()
    second = GrpcFrontend(Config(grpc={"port": port}), FakeHost(core))
    with pytest.raises(OSError, match="cannot listen"):  # not shared (no SO_REUSEPORT)
        second.start()
