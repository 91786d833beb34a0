"""onnxruntime sessions: provider choice (TensorRT → CUDA → CPU), threads, device arenas.

GPU facts this follows (onnxruntime ≥ 1.18 docs and source): `get_available_providers()`
lists TensorRT whenever onnxruntime-gpu is installed, even without libnvinfer, so `auto`
puts TensorRT in its chain only when the library really loads; a session whose provider
fails is silently retried by onnxruntime on CUDA+CPU *without the provider options*, so
GPU sessions disable that fallback and this module retries explicitly, with options, and
says so. The frontend has data-dependent shapes (NonZero, ScatterND, RandomNormalLike):
it never goes to TensorRT and uses the heuristic cuDNN search; the decoder sees only the
warmed bucket lengths, so it gets the exhaustive search and TensorRT profiles over them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnxruntime as ort

log = logging.getLogger(__name__)

Provider = Literal["auto", "tensorrt", "cuda", "cpu"]
Role = Literal["frontend", "decoder"]
_ORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
_FALLBACK_ORDER = ("tensorrt", "cuda", "cpu")
_NVINFER = ("libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so")


@dataclass(frozen=True)
class RuntimeConfig:
    provider: Provider = "auto"
    intra_op_threads: int = 0  # 0: onnxruntime picks (one per physical core)
    gpu_mem_limit_mb: int = 1024
    device_id: int = 0
    trt_cache_dir: Path | None = None
    trt_fp16: bool = True
    # onnxruntime graph transformers left out: NHWC_LAYOUT where `prepare` measured the
    # INT8 graphs faster in their own layout (precision.py).
    disabled_optimizers: tuple[str, ...] = ()


NHWC_LAYOUT = "NhwcTransformer"  # runs quantized convs channels-last, transposing around them


@dataclass
class ProviderChoice:
    requested: str
    used: str
    warning: str | None = None
    chain: list[Any] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # provider → why it was left out


def tensorrt_loads() -> bool:
    """True when libnvinfer can be loaded (listing the provider proves nothing)."""
    names = [*_NVINFER, ctypes.util.find_library("nvinfer")]
    for name in filter(None, names):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def preload_gpu_libraries() -> None:
    """Load pip-installed CUDA/cuDNN (onnxruntime-gpu[cuda,cudnn]) before any session,
    or session creation fails on a missing libcublasLt and silently runs on the CPU."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    try:
        preload()
    except Exception as exc:  # the system's own CUDA may still be found
        log.warning("onnxruntime.preload_dlls() failed: %s", exc)


def choose_provider(
    config: RuntimeConfig,
    available: Sequence[str] | None = None,
    trt_check: Callable[[], bool] = tensorrt_loads,
) -> ProviderChoice:
    """Pick the best usable provider at or below the requested one; say so loudly."""
    have = set(ort.get_available_providers() if available is None else available)
    wanted = _FALLBACK_ORDER if config.provider == "auto" else (config.provider,)
    order = list(_FALLBACK_ORDER[_FALLBACK_ORDER.index(wanted[0]) :])
    skipped: dict[str, str] = {}
    for name in order[:-1]:
        if _ORT_NAMES[name] not in have:
            skipped[name] = "not in this onnxruntime build (install onnxruntime-gpu)"
        elif name == "tensorrt" and not trt_check():
            skipped[name] = "libnvinfer (TensorRT) does not load"
    used = next(name for name in order if name not in skipped)
    warning = None
    if config.provider not in ("auto", used):
        reason = skipped.get(config.provider, "unavailable")
        warning = (
            f"requested execution provider {config.provider!r} is not usable ({reason}; "
            f"onnxruntime offers: {', '.join(sorted(have))}); using {used!r}"
        )
        log.warning(warning)
    elif skipped:
        log.info("providers left out: %s", "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    if used != "cpu":
        preload_gpu_libraries()
    start = order.index(used)
    chain = [name for name in order[start:] if name not in skipped]
    if "cpu" not in chain:
        chain.append("cpu")
    return ProviderChoice(config.provider, used, warning, chain, skipped)


def provider_entries(
    choice: ProviderChoice,
    config: RuntimeConfig,
    role: Role,
    profile: tuple[str, int, int, int] | None = None,
) -> list[Any]:
    """The session's provider list with each provider's options, for this graph's role.

    profile: (input name, min, opt, max frames) of the decoder's latent input."""
    names = [n for n in choice.chain if not (role == "frontend" and n == "tensorrt")]
    return [_provider_entry(name, config, role, profile) for name in names]


def _provider_entry(
    name: str, config: RuntimeConfig, role: Role, profile: tuple[str, int, int, int] | None
) -> Any:
    if name == "cuda":
        return (
            _ORT_NAMES[name],
            {
                "device_id": config.device_id,
                "gpu_mem_limit": config.gpu_mem_limit_mb * 1024 * 1024,
                "arena_extend_strategy": "kSameAsRequested",
                # Exhaustive search benchmarks every new shape: only the bucketed decoder.
                "cudnn_conv_algo_search": "EXHAUSTIVE" if role == "decoder" else "HEURISTIC",
                "do_copy_in_default_stream": True,
            },
        )
    if name == "tensorrt":
        options: dict[str, Any] = {
            "device_id": config.device_id,
            "trt_fp16_enable": config.trt_fp16,
            "trt_max_workspace_size": config.gpu_mem_limit_mb * 1024 * 1024,
        }
        if config.trt_cache_dir is not None:
            config.trt_cache_dir.mkdir(parents=True, exist_ok=True)
            options.update(
                trt_engine_cache_enable=True,
                trt_engine_cache_path=str(config.trt_cache_dir),
                trt_timing_cache_enable=True,
                trt_timing_cache_path=str(config.trt_cache_dir),
            )
        if profile is not None:  # explicit profile: no engine rebuild for a new length
            tensor, low, opt, high = profile
            options.update(
                trt_profile_min_shapes=f"{tensor}:1x192x{low}",
                trt_profile_opt_shapes=f"{tensor}:1x192x{opt}",
                trt_profile_max_shapes=f"{tensor}:1x192x{high}",
            )
        return (_ORT_NAMES[name], options)
    return _ORT_NAMES[name]


def confirm_provider(choice: ProviderChoice, session: ort.InferenceSession) -> str:
    """onnxruntime may still run elsewhere than asked: record and return what runs."""
    actual = provider_name(session)
    if actual != choice.used:
        choice.warning = (
            f"execution provider {choice.used!r} failed to initialise; running on {actual!r}"
        )
        log.warning(choice.warning)
        choice.used = actual
    return actual


def provider_name(session: Any) -> str:
    """Magpie's name (tensorrt, cuda, cpu) of the provider a session runs on first."""
    names = {v: k for k, v in _ORT_NAMES.items()}
    return names.get(session.get_providers()[0], "cpu")


def device_type(provider: str) -> str:
    return "cpu" if provider == "cpu" else "cuda"


_shared_arena_lock = threading.Lock()
_shared_arena = False


def share_cpu_arena() -> bool:
    """Register one CPU memory arena in onnxruntime's environment (once per process), for
    every session to allocate from. Each session otherwise keeps its own arena at its
    peak: worker lanes (stream/turns.py), each with its own encoder, flow and decoder session,
    held +540 MB of RSS on 2 lanes; sharing one arena, +220 MB under load (measured:
    peak 995 against 644 MB, one lane 430 MB), at the same speed. False where this
    onnxruntime cannot (each session then keeps its own)."""
    global _shared_arena
    with _shared_arena_lock:
        if not _shared_arena:
            try:
                info = ort.OrtMemoryInfo(
                    "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
                )
                # extend by powers of two (0): growing by each request (1) fragmented the
                # shared arena to 1.1-1.4 GB
                ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 0, -1, -1))
                _shared_arena = True
            except Exception as exc:  # onnxruntime raises its own untyped errors
                log.warning("one CPU arena for all sessions unavailable: %s", exc)
        return _shared_arena


_shared_pool_lock = threading.Lock()
_shared_pool: bool | None = None  # None: the process has not asked (own pools)


def use_shared_thread_pool(threads: int) -> bool:
    """Run every onnxruntime session this process makes from now on on one intra-op
    thread pool, `threads` wide (0: one per core). Call it before the first session:
    onnxruntime may refuse once its environment exists (False; 1.32 accepts, and earlier
    sessions keep their own pools). Every later session must use it (onnxruntime refuses a
    session's own pool then: make them with `session_options` or `plain_options`), so only
    a process that runs sessions one at a time opts in: the daemon and `say` without
    worker lanes, the bench's workers; not one that quantizes (onnxruntime's calibration
    makes its own sessions).

    Its workers spin between operators. A session's own pool cannot: its threads spin on
    after its run while the next session runs (a unit is encoder, flow, decoder, flow,
    decoder back to back) and take the cores it needs. A shared pool's spinning threads
    are the next session's own. Measured against per-session pools without spinning
    (INT8, 2 cores, 3 pairs of fresh processes): total 0.89 / 0.91 / 0.96x on the
    short / medium / long bench texts, every pair faster."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            from onnxruntime.capi import onnxruntime_pybind11_state as binding

            options = ort.SessionOptions()
            options.use_per_session_threads = False
            options.log_severity_level = 4  # a refusal is the answer, not an error
            try:
                binding.set_global_thread_pool_sizes(threads, 1)
                ort.InferenceSession(_identity_model(), options, providers=["CPUExecutionProvider"])
                _shared_pool = True
            except Exception as exc:  # onnxruntime raises its own untyped errors
                log.info("one thread pool for all sessions unavailable: %s", exc)
                _shared_pool = False
        return _shared_pool


def shared_thread_pool() -> bool:
    return bool(_shared_pool)


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe", [value], [output]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


_blocked_convs: bool | None = None


def blocked_convs() -> bool:
    """Whether this onnxruntime runs a float 2-D conv in its blocked NCHWc form on this
    CPU (MLAS has such kernels for x86 AVX2/AVX-512): the condition for running the
    vocoder's 1-D convs as 2-D ones (graph/conv2d.py). Found once per process by
    optimizing a one-conv graph and looking for the blocked conv it becomes (a Conv of
    the com.microsoft.nchwc domain between reorders)."""
    global _blocked_convs
    if _blocked_convs is None:
        import tempfile

        import onnx

        with tempfile.TemporaryDirectory(prefix="magpie-nchwc-") as folder:
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            options.optimized_model_filepath = f"{folder}/optimized.onnx"
            try:
                ort.InferenceSession(_conv_model(), options, providers=["CPUExecutionProvider"])
                optimized = onnx.load(options.optimized_model_filepath)
                _blocked_convs = any(
                    n.op_type == "Conv" and n.domain.startswith("com.microsoft")
                    for n in optimized.graph.node
                )
            except Exception as exc:  # onnxruntime's own untyped errors: plain convs then
                log.debug("NCHWc probe failed: %s", exc)
                _blocked_convs = False
    return _blocked_convs


def _conv_model() -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((32, 32, 1, 3), np.float32), "w")
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 1, 64])
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 64])
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3], pads=[0, 1, 0, 1])
    graph = helper.make_graph([conv], "probe", [value], [output], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def plain_options() -> ort.SessionOptions:
    """onnxruntime's default options, on the shared thread pool where the process has it:
    for checks that run a graph outside make_session."""
    options = ort.SessionOptions()
    if shared_thread_pool():
        options.use_per_session_threads = False
    return options


def session_options(config: RuntimeConfig) -> ort.SessionOptions:
    options = ort.SessionOptions()
    if share_cpu_arena():
        options.add_session_config_entry("session.use_env_allocators", "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if shared_thread_pool():
        options.use_per_session_threads = False  # its size and spinning are the pool's
        return options
    if config.intra_op_threads:
        options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = 1
    # Frontend and decoder hand off back to back; spinning threads of the idle session
    # steal cores from the busy one on small boards.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def make_session(
    path: Path,
    config: RuntimeConfig,
    choice: ProviderChoice,
    role: Role = "decoder",
    profile: tuple[str, int, int, int] | None = None,
    create: Callable[..., Any] = ort.InferenceSession,
) -> ort.InferenceSession:
    """A session on the chosen provider with its options. When a GPU provider fails,
    onnxruntime retries on its fallback list *without the options* (gpu_mem_limit, cache
    paths, profiles): such a session is discarded and the next provider is tried with
    its options, loudly."""
    entries = provider_entries(choice, config, role, profile)
    while True:
        wanted = _name(entries[0])
        try:
            extra = {"disabled_optimizers": list(config.disabled_optimizers)}
            session = create(
                str(path),
                sess_options=session_options(config),
                providers=entries,
                **(extra if config.disabled_optimizers else {}),
            )
        except Exception as exc:
            if len(entries) <= 1:
                raise
            log.warning(
                "%s session on %s failed (%s); trying %s", role, wanted, exc, _name(entries[1])
            )
            entries = entries[1:]
            continue
        runs_on = session.get_providers()[0]
        if runs_on != wanted and len(entries) > 1:
            log.warning(
                "%s session asked for %s but onnxruntime fell back to %s without its "
                "options; trying %s with options",
                role,
                wanted,
                runs_on,
                _name(entries[1]),
            )
            entries = entries[1:]
            continue
        if hasattr(session, "disable_fallback"):
            session.disable_fallback()  # a later failure surfaces, not a silent CPU run
        return session


def _name(entry: Any) -> str:
    return entry[0] if isinstance(entry, tuple) else entry
