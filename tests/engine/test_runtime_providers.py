"""Provider choice, per-role session options, explicit GPU fallback and precision per
provider, by injection (no GPU here): what onnxruntime offers, whether libnvinfer loads,
and a session factory that fails as onnxruntime-gpu does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest
from magpie_tts.engine.graph.split import SplitGraph
from magpie_tts.engine.precision import int8_paths, select_decoder, write_report
from magpie_tts.engine.runtime import (
    RuntimeConfig,
    choose_provider,
    make_session,
    provider_entries,
)

from ..harness import REPO

GPU_BUILD = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
PROFILE = ("/Mul_7_output_0", 32, 528, 528)


def test_auto_leaves_tensorrt_out_when_libnvinfer_does_not_load(caplog) -> None:
    choice = choose_provider(RuntimeConfig(), GPU_BUILD, trt_check=lambda: False)
    assert choice.used == "cuda" and choice.chain == ["cuda", "cpu"]
    assert "libnvinfer" in choice.skipped["tensorrt"] and choice.warning is None


def test_requested_provider_missing_falls_back_loudly(caplog) -> None:
    choice = choose_provider(RuntimeConfig(provider="cuda"), ["CPUExecutionProvider"])
    assert choice.used == "cpu" and choice.chain == ["cpu"]
    assert "not usable" in choice.warning and "onnxruntime-gpu" in choice.warning
    assert choice.warning in caplog.text


def test_gpu_choice_preloads_pip_cuda_libraries(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(ort, "preload_dlls", lambda: calls.append(1), raising=False)
    choose_provider(RuntimeConfig(), GPU_BUILD, trt_check=lambda: True)
    choose_provider(RuntimeConfig(provider="cpu"), GPU_BUILD)
    assert calls == [1]


def test_frontend_never_on_tensorrt_and_options_per_role(tmp_path: Path) -> None:
    config = RuntimeConfig(trt_cache_dir=tmp_path / "trt", device_id=1, gpu_mem_limit_mb=512)
    choice = choose_provider(config, GPU_BUILD, trt_check=lambda: True)
    assert choice.used == "tensorrt"
    frontend = provider_entries(choice, config, "frontend")
    assert [e[0] if isinstance(e, tuple) else e for e in frontend] == GPU_BUILD[1:]
    assert frontend[0][1]["cudnn_conv_algo_search"] == "HEURISTIC"
    decoder = provider_entries(choice, config, "decoder", PROFILE)
    trt, cuda = decoder[0][1], decoder[1][1]
    assert trt["trt_profile_min_shapes"] == "/Mul_7_output_0:1x192x32"
    assert trt["trt_profile_max_shapes"] == "/Mul_7_output_0:1x192x528"
    assert trt["trt_engine_cache_enable"] and trt["trt_timing_cache_enable"]
    assert trt["trt_engine_cache_path"] == str(tmp_path / "trt") and trt["device_id"] == 1
    assert cuda["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    assert cuda["gpu_mem_limit"] == 512 * 1024 * 1024 and decoder[-1] == "CPUExecutionProvider"


class FakeSession:
    def __init__(self, runs_on: str) -> None:
        self.runs_on = runs_on
        self.fallback = True

    def get_providers(self) -> list[str]:
        return [self.runs_on]

    def disable_fallback(self) -> None:
        self.fallback = False


def test_failed_gpu_session_is_retried_on_the_next_provider_with_its_options(caplog) -> None:
    config = RuntimeConfig()
    choice = choose_provider(config, GPU_BUILD, trt_check=lambda: True)
    asked: list[list] = []

    def create(path, sess_options, providers):
        asked.append(providers)
        first = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
        if first == "TensorrtExecutionProvider":
            raise RuntimeError("TensorRT EP could not build the engine")
        # onnxruntime's own silent retry: asked for CUDA, runs on CPU, options gone
        return FakeSession("CPUExecutionProvider" if len(asked) == 2 else first)

    session = make_session(Path("x.onnx"), config, choice, "decoder", PROFILE, create=create)
    assert len(asked) == 3
    assert asked[1][0][0] == "CUDAExecutionProvider" and "gpu_mem_limit" in asked[1][0][1]
    assert asked[2] == ["CPUExecutionProvider"]
    assert session.runs_on == "CPUExecutionProvider" and not session.fallback
    assert "fell back" in caplog.text and "could not build" in caplog.text


@pytest.fixture
def prepared_split(tmp_path: Path) -> SplitGraph:
    split = SplitGraph(tmp_path / "frontend.onnx", tmp_path / "decoder.onnx", "/Mul_7_output_0", ())
    model, _ = int8_paths(split)
    model.write_bytes(b"int8")
    write_report(split, {"passed": True, "reason": "measured"})
    return split


@pytest.mark.parametrize(
    "provider,requested,precision",
    [
        ("cpu", "auto", "int8"),
        ("cpu", "fp32", "fp32"),
        ("cuda", "auto", "fp32"),  # asymmetric u8 QDQ is slower than fp32 on the CUDA EP
        ("cuda", "int8", "fp32"),
        ("tensorrt", "auto", "fp16"),
    ],
)
def test_precision_is_chosen_per_provider(prepared_split, provider, requested, precision) -> None:
    path, used, reason = select_decoder(prepared_split, requested, provider)
    assert used == precision and reason
    assert path.name == ("decoder.int8.onnx" if used == "int8" else "decoder.onnx")


def _install_plan(**env: str) -> subprocess.CompletedProcess[str]:
    script = REPO / "tools" / "install-gpu.sh"
    return subprocess.run(
        [str(script), "/venv/bin/python", "--dry-run"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("major,spec", [("12", "==1.26.0"), ("13", ">=1.27,<2")])
def test_gpu_install_pins_the_cuda_major_and_ends_owning_the_module(major, spec) -> None:
    plan = _install_plan(ARCH="x86_64", CUDA_MAJOR=major).stdout.splitlines()
    assert f"onnxruntime-gpu[cuda,cudnn]{spec}" in plan[0]
    assert "--force-reinstall --no-deps" in plan[1] and plan[1].endswith(spec)
    assert "CUDAExecutionProvider" in plan[2]  # checked, not assumed


def test_gpu_install_on_jetson_needs_the_jetpack_index() -> None:
    refused = _install_plan(ARCH="aarch64", JETSON_INDEX="")
    assert refused.returncode == 2 and "JetPack" in refused.stderr
    plan = _install_plan(ARCH="aarch64", JETSON_INDEX="file:///srv/jetson-index").stdout
    assert "--index-url file:///srv/jetson-index onnxruntime-gpu" in plan


ARENA_PROBE = """
import sys
import numpy as np
import onnxruntime as ort
from magpie_tts.engine.runtime import RuntimeConfig, session_options

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

shared = sys.argv[2] == "shared"
sessions = []
for _ in range(3):  # a primary and two worker lanes' decoders
    if shared:
        options = session_options(RuntimeConfig(provider="cpu"))
    else:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
    sessions.append(ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"]))
name = sessions[0].get_inputs()[0].name
before = rss_mb()
for session in sessions:
    session.run(None, {name: np.zeros((1, 192, 534), np.float32)})
print(rss_mb() - before)
"""


def test_sessions_share_one_cpu_arena(synth) -> None:
    """Worker lanes each hold a decoder session: with one arena in onnxruntime's
    environment their memory is reused across sessions instead of each keeping its own
    peak (measured in a fresh process each, on the largest decoder window)."""
    decoder = str(synth.graph_paths["decoder"])

    def growth(mode: str) -> float:
        probe = [sys.executable, "-c", ARENA_PROBE, decoder, mode]
        return float(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)

    separate, shared = growth("separate"), growth("shared")
    assert shared < 0.6 * separate, (shared, separate)


SHARED_POOL_PROBE = """
import json, shutil, sys
from pathlib import Path
import numpy as np
from magpie_tts.engine import StreamingSynthesizer, SynthesisOptions, load_voice
from magpie_tts.engine.graph.flow_split import split_flow
from magpie_tts.engine.runtime import RuntimeConfig, use_shared_thread_pool
from magpie_tts.engine.stream.config import EngineConfig

state, mode, scratch, seed = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
if mode == "late":  # a session before the opt-in: onnxruntime's environment exists
    import onnxruntime as ort
    from magpie_tts.engine.runtime import _identity_model
    ort.InferenceSession(_identity_model(), providers=["CPUExecutionProvider"])
opted = use_shared_thread_pool(0)
config = EngineConfig(cache_dir=state, runtime=RuntimeConfig(provider="cpu"), precision="fp32",
                      seed=seed)
synth = StreamingSynthesizer(load_voice(), config)
quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
np.save(scratch / "pcm.npy", synth.synthesize(sys.argv[5], quiet))
# A split built here: its checks make sessions outside make_session.
frontend = scratch / "frontend.onnx"
shutil.copy(synth.graph_paths["frontend"], frontend)
built = split_flow(frontend, synth.latent_name, synth.durations_name, synth.flow_probes)
print(json.dumps({
    "opted": opted,
    "own_pools": synth.frontend.get_session_options().use_per_session_threads,
    "built": built is not None,
}))
"""


@pytest.mark.parametrize("mode", ["early", "late"])
def test_a_process_opts_into_one_thread_pool_before_its_first_session(
    synth, state_dir, tmp_path, mode
) -> None:
    """Before any session, every session of the process runs on one (spinning) pool, a
    split's own checks included. After one, onnxruntime may refuse (each session then
    keeps its own pool; 1.32 accepts): either way every later session follows. The audio
    is the same."""
    import numpy as np
    from magpie_tts.engine import SynthesisOptions

    from ..harness import SEED

    text = "Turning off the lights."
    probe = [sys.executable, "-c", SHARED_POOL_PROBE, str(state_dir), mode, str(tmp_path)]
    done = subprocess.run([*probe, str(SEED), text], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["opted"] or mode == "late"
    assert facts["own_pools"] == (not facts["opted"])
    assert facts["built"]
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    reference = synth.synthesize(text, quiet).astype(np.int32)
    heard = np.load(tmp_path / "pcm.npy").astype(np.int32)
    assert len(heard) == len(reference)
    assert np.abs(heard - reference).max() <= 2  # thread partitioning may round differently
