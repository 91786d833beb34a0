"""Shared fixtures: the real default voice on CPU, and an offline speech recognizer."""

from __future__ import annotations

import shutil
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from magpie_tts.engine import StreamingSynthesizer, load_voice
from magpie_tts.engine.graph import flow_split as flow_module
from magpie_tts.engine.graph.flow_split import FlowSplit, split_flow
from magpie_tts.engine.int8 import GATE_TEXTS
from magpie_tts.engine.runtime import RuntimeConfig
from magpie_tts.engine.stream.config import EngineConfig
from magpie_tts.engine.voice import default_model_path
from magpie_tts.tools.recognizer import Recognizer

from .harness import SEED

SPEAKER_SENTENCES = GATE_TEXTS[:10]  # smart-speaker sentences, shared with the INT8 gate

# A test that starts a daemon or a broker, or loads the recognizer, is `slow`: those parts
# cost seconds each. Modules that start them otherwise (soak, wheels, TLS brokers) mark
# themselves. `make test-fast` runs the rest.
SLOW_FIXTURES = frozenset({"daemon", "paced_daemon", "broker", "recognizer"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="session")
def voice():
    return load_voice()


@pytest.fixture(scope="session")
def synth(voice, state_dir: Path) -> StreamingSynthesizer:
    return StreamingSynthesizer(
        voice,
        EngineConfig(
            cache_dir=state_dir,
            runtime=RuntimeConfig(provider="cpu"),
            precision="fp32",
            seed=SEED,
        ),
    )


@pytest.fixture
def split_with_rewrite(synth, tmp_path, monkeypatch) -> Callable[..., FlowSplit]:
    """The encoder/flow split of a copy of the voice's frontend, built with one of
    flow_split.py's graph rewrites (by name) replaced: how a rewrite's failure is handled."""

    def split(rewrite: str, replacement: Callable[[onnx.ModelProto], int]) -> FlowSplit:
        monkeypatch.setattr(flow_module, rewrite, replacement)
        frontend = tmp_path / "frontend.onnx"
        frontend.write_bytes(synth.graph_paths["frontend"].read_bytes())
        made = split_flow(frontend, synth.latent_name, synth.durations_name, synth.flow_probes)
        assert made is not None
        return made

    return split


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(pcm.astype("<i2").tobytes())
    return path


def tiny_voice(path: Path, inputs: tuple[str, ...] = ("input", "input_lengths", "scales")) -> Path:
    """A tiny ONNX graph with Piper's inputs (or `inputs`) and the real voice's config
    beside it: listed as a voice, but it does not load (no vocoder in it)."""
    values = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [3]) for n in inputs]
    output = onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [3])
    node = onnx.helper.make_node("Identity", [inputs[-1]], ["output"], name=path.stem)
    graph = onnx.helper.make_graph([node], path.stem, values, [output])
    onnx.save(onnx.helper.make_model(graph), path)
    config = default_model_path().with_name(default_model_path().name + ".json")
    shutil.copy(config, path.with_name(path.name + ".json"))
    return path


@pytest.fixture(scope="session")
def recognizer() -> Recognizer:
    return Recognizer()


# -- daemon fixtures: real broker, real ALSA file PCMs, the daemon as a subprocess ----------

from .harness import Broker, Probe, make_daemon  # noqa: E402


@pytest.fixture(scope="session")
def prepared_state(state_dir: Path, synth) -> Path:
    """The state dir with the split graphs already built (by the synth fixture)."""
    return state_dir


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory):
    server = Broker(tmp_path_factory.mktemp("broker")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, broker, prepared_state):
    proc = make_daemon(tmp_path_factory.mktemp("daemon"), broker.port, prepared_state).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def paced_daemon(tmp_path_factory, broker, prepared_state):
    """A daemon whose ALSA PCM is paced at real time by pv (barge-in, priorities)."""
    proc = make_daemon(
        tmp_path_factory.mktemp("paced"), broker.port, prepared_state, device="ttspaced"
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def probe(broker):
    watcher = Probe(broker.port, ["#"])
    yield watcher
    watcher.close()
