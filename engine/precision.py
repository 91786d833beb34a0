"""Which decoder to run: INT8 only where `prepare` measured it faster and good enough."""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from .graph.conv2d import rewrite_float_convs_2d
from .graph.split import SplitGraph
from .runtime import NHWC_LAYOUT, blocked_convs

log = logging.getLogger(__name__)

INT8_DECODER = "decoder.int8.onnx"
INT8_REPORT = "int8_report.json"
INT8_FRONTEND = "frontend.int8.onnx"  # the flow quantized; durations stay fp32


def int8_paths(split: SplitGraph) -> tuple[Path, Path]:
    folder = split.decoder.parent
    return folder / INT8_DECODER, folder / INT8_REPORT


def flow_path(split: SplitGraph) -> Path:
    return split.decoder.parent / INT8_FRONTEND


def select_frontend(split: SplitGraph, precision: str) -> tuple[Path, str]:
    """(frontend path, what runs): the INT8-flow frontend only with the INT8 decoder and
    only where `prepare` adopted it (its whole path passed the same gate)."""
    report = read_report(split) or {}
    path = flow_path(split)
    if precision == "int8" and report.get("frontend") == "flow int8" and path.is_file():
        return path, "flow int8"
    return split.frontend, "fp32"


def expands(split: SplitGraph, precision: str) -> bool:
    """Whether the decoder's audio goes through the expander: the INT8 decoder's, where
    its gate was measured through it (a report of an older prepare was not)."""
    return precision == "int8" and bool((read_report(split) or {}).get("expander"))


def disabled_optimizers(split: SplitGraph, precision: str) -> tuple[str, ...]:
    """Graph transformers to leave out for this precision: the INT8 graphs' NHWC layout
    where `prepare` measured them faster without it (the audio is the same)."""
    return layout_optimizers(read_report(split) or {}) if precision == "int8" else ()


CHANNELS_LAST = "channels-last"  # a report's cpu_layout: the decoder rewritten so (NHWC runs)


def layout_optimizers(report: dict) -> tuple[str, ...]:
    """The transformers a report's measured INT8 layout leaves out."""
    return (NHWC_LAYOUT,) if report.get("cpu_layout") == "nchw" else ()


def cpu_name() -> str:
    """The CPU a verdict was measured on: its model name (x86) or its features (ARM)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for field in ("model name", "Hardware", "Features"):
        for line in lines:
            if line.startswith(field) and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def verdict_key() -> dict[str, str]:
    """What an INT8 verdict holds for besides the model (its folder is the model's hash):
    onnxruntime's quantized kernels and the CPU they run on. Another onnxruntime or
    another CPU (an image moved to a new board) measures again."""
    return {"onnxruntime": ort.__version__, "cpu": cpu_name()}


def read_report(split: SplitGraph) -> dict | None:
    """The INT8 report: the verdict for this model, this onnxruntime and this CPU (a
    report made elsewhere, or with none of these recorded, is no verdict here)."""
    _, report = int8_paths(split)
    try:
        found = json.loads(report.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("key") != verdict_key():
        return None
    return found


def write_report(split: SplitGraph, report: dict[str, Any]) -> None:
    """Write the report atomically (a temp file renamed over it): the report is what
    makes INT8 files count, so it is written last, whole, or not at all."""
    _, path = int8_paths(split)
    handle, temp = tempfile.mkstemp(prefix=".int8_report.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump({**report, "key": verdict_key()}, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def needs_preparation(split: SplitGraph, requested: str, provider: str) -> bool:
    """Whether a daemon should prepare INT8 itself: CPU, INT8 not turned off, and no
    verdict (pass or fail) for this model, onnxruntime and CPU."""
    return provider == "cpu" and requested != "fp32" and read_report(split) is None


def select_decoder(
    split: SplitGraph, requested: str, provider: str = "cpu", trt_fp16: bool = True
) -> tuple[Path, str, str]:
    """(decoder path, precision that runs, why) for 'auto', 'fp32' or 'int8'.

    Precision is chosen per provider: the prepared INT8 model is static QDQ with
    asymmetric u8 activations, fast only on the CPU (on the CUDA EP Q/DQ wrap fp32
    convolutions, slower than fp32; TensorRT takes only symmetric INT8). On CUDA the
    fp32 decoder runs; on TensorRT the fp32 graph is built as fp16 (`trt_fp16`)."""
    if provider != "cpu":
        if requested == "int8":
            log.warning("INT8 requested, but the INT8 model is CPU-only QDQ; fp32 on %s", provider)
        if provider == "tensorrt" and trt_fp16:
            return split.decoder, "fp16", "TensorRT builds the decoder in fp16"
        return split.decoder, "fp32", f"fp32 on {provider} (the INT8 QDQ model is for the CPU)"
    if requested == "fp32":
        return split.decoder, "fp32", "fp32 requested"
    model, _ = int8_paths(split)
    report = read_report(split)
    if report is None or not model.is_file():
        reason = "no INT8 model prepared yet (the daemon prepares it, or `magpie-tts prepare`)"
    elif requested == "int8":
        if not report.get("passed"):
            log.warning("INT8 forced although its gate failed: %s", report.get("reason"))
        return model, "int8", "int8 requested"
    elif report.get("passed"):
        return model, "int8", f"INT8 passed its gate: {report.get('reason')}"
    else:
        reason = f"INT8 gate failed: {report.get('reason')}"
    if requested == "int8":
        log.warning("INT8 requested but unavailable: %s; using fp32", reason)
    else:
        log.info("using fp32 decoder: %s", reason)
    return split.decoder, "fp32", reason


def single_thread_decoder(path: Path) -> Path:
    """The decoder a one-thread session runs (a worker lane, a one-core board): its float
    convs as 2-D ones where this onnxruntime runs those blocked here (graph/conv2d.py:
    1.15-1.18x on one thread, but slower on two, where MLAS splits a height-1 conv
    poorly), else `path` itself. Built once beside `path`, atomically; `path` itself
    where it cannot be written."""
    if not blocked_convs():
        return path
    blocked = path.with_name(f"{path.stem}.conv2d.onnx")
    try:
        if blocked.is_file() and blocked.stat().st_mtime_ns >= path.stat().st_mtime_ns:
            return blocked
        model = onnx.load(str(path))
        if not rewrite_float_convs_2d(model):
            return path
        handle, temp = tempfile.mkstemp(prefix=f".{blocked.name}.", dir=path.parent)
        os.close(handle)
        try:
            onnx.save(model, temp)
            os.replace(temp, blocked)
        finally:
            Path(temp).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("one-thread decoder kept in its 1-D form: %s", exc)
        return path
    return blocked
