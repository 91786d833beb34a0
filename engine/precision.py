"""Which decoder to run: INT8 only where `prepare` measured it faster and good enough."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .graph import SplitGraph

log = logging.getLogger(__name__)

INT8_DECODER = "decoder.int8.onnx"
INT8_REPORT = "int8_report.json"


def int8_paths(split: SplitGraph) -> tuple[Path, Path]:
    folder = split.decoder.parent
    return folder / INT8_DECODER, folder / INT8_REPORT


def read_report(split: SplitGraph) -> dict | None:
    _, report = int8_paths(split)
    try:
        return json.loads(report.read_text())
    except (OSError, ValueError):
        return None


def select_decoder(split: SplitGraph, requested: str) -> tuple[Path, str, str]:
    """(decoder path, precision used, why) for 'auto', 'fp32' or 'int8'."""
    if requested == "fp32":
        return split.decoder, "fp32", "fp32 requested"
    model, _ = int8_paths(split)
    report = read_report(split)
    if report is None or not model.is_file():
        reason = "no INT8 model prepared (run `magpie-tts prepare`)"
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
