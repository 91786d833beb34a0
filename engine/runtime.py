"""onnxruntime sessions: provider choice (TensorRT → CUDA → CPU), threads, device arenas."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnxruntime as ort

log = logging.getLogger(__name__)

Provider = Literal["auto", "tensorrt", "cuda", "cpu"]
_ORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
_FALLBACK_ORDER = ("tensorrt", "cuda", "cpu")


@dataclass(frozen=True)
class RuntimeConfig:
    provider: Provider = "auto"
    intra_op_threads: int = 0  # 0: onnxruntime picks (one per physical core)
    gpu_mem_limit_mb: int = 1024
    device_id: int = 0
    trt_cache_dir: Path | None = None
    trt_fp16: bool = True


@dataclass
class ProviderChoice:
    requested: str
    used: str
    warning: str | None = None
    chain: list[Any] = field(default_factory=list)


def choose_provider(config: RuntimeConfig) -> ProviderChoice:
    """Pick the best available provider at or below the requested one; say so loudly."""
    available = set(ort.get_available_providers())
    wanted = _FALLBACK_ORDER if config.provider == "auto" else (config.provider,)
    order = list(_FALLBACK_ORDER[_FALLBACK_ORDER.index(wanted[0]) :])
    used = next(name for name in order if _ORT_NAMES[name] in available)
    warning = None
    if config.provider not in ("auto", used):
        warning = (
            f"requested execution provider {config.provider!r} is not available "
            f"(have: {', '.join(sorted(available))}); using {used!r}"
        )
        log.warning(warning)
    start = order.index(used)
    chain = [_provider_entry(name, config) for name in order[start:]]
    if "cpu" not in order[start:]:
        chain.append(_provider_entry("cpu", config))
    return ProviderChoice(requested=config.provider, used=used, warning=warning, chain=chain)


def _provider_entry(name: str, config: RuntimeConfig) -> Any:
    if name == "cuda":
        return (
            _ORT_NAMES[name],
            {
                "device_id": config.device_id,
                "gpu_mem_limit": config.gpu_mem_limit_mb * 1024 * 1024,
                "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "EXHAUSTIVE",
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
            options["trt_engine_cache_enable"] = True
            options["trt_engine_cache_path"] = str(config.trt_cache_dir)
        return (_ORT_NAMES[name], options)
    return _ORT_NAMES[name]


def confirm_provider(choice: ProviderChoice, session: ort.InferenceSession) -> None:
    """onnxruntime silently falls back (e.g. CUDA listed but no GPU): record what runs."""
    names = {v: k for k, v in _ORT_NAMES.items()}
    actual = names.get(session.get_providers()[0], "cpu")
    if actual != choice.used:
        choice.warning = (
            f"execution provider {choice.used!r} failed to initialise; running on {actual!r}"
        )
        log.warning(choice.warning)
        choice.used = actual


def device_type(provider: str) -> str:
    return "cpu" if provider == "cpu" else "cuda"


def make_session(path: Path, config: RuntimeConfig, choice: ProviderChoice) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if config.intra_op_threads:
        options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = 1
    # Frontend and decoder hand off back to back; spinning threads of the idle session
    # steal cores from the busy one on small boards.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=choice.chain)
