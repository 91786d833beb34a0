"""The frontend in two graphs, so the flow runs only over the frames a window needs.

A VITS frontend is the text encoder and duration predictor (at the rate of phoneme ids)
and then the flow (z_p → z, at the rate of frames). The flow is a stack of
convolutional coupling layers: local in time, like the decoder, so it too can run on a
span of frames with its receptive field as context and match the whole run. Split
there, the first sound waits only for the encoder and the flow over the first window
(measured on the medium sentence's first unit, INT8: 59 ms whole, 30 ms encoder and
duration predictor + 8 ms flow over the first window), and no unit runs the flow over
the context words it is spoken with but does not emit.

The cut is found structurally: z_p is the prior's sample (the Add of the mean and the
scaled RandomNormalLike noise that reaches z), the mask is the other input of the Mul
that makes z. The split is checked (the flow must need nothing else) and cached beside
the frontend it came from; a graph where any of that fails keeps the whole frontend.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.utils

from .graph import receptive_frames

log = logging.getLogger(__name__)

FLOW_FORMAT = 1
FlowRun = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (z_p, mask) windows → z


@dataclass(frozen=True)
class FlowSplit:
    encoder: Path  # ids → z_p, mask (and durations)
    flow: Path  # z_p, mask → z
    prior: str  # z_p
    mask: str
    context: int  # frames of z_p on either side that reach one frame of z


def find_flow_cut(model: onnx.ModelProto, latent: str) -> tuple[str, str] | None:
    """(z_p, mask) of a VITS frontend whose output is z, or None."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    last = producers.get(latent)
    if last is None or last.op_type != "Mul" or len(last.input) != 2:
        return None
    upstream = _ancestors(last.input[0], producers)
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            continue
        tensor = node.output[0]
        while True:  # noise × exp(logs_p) × noise scale, then + m_p
            following = consumers.get(tensor, [])
            if len(following) != 1 or following[0].op_type not in ("Mul", "Add"):
                break
            tensor = following[0].output[0]
            if following[0].op_type == "Add":
                if tensor in upstream:
                    return tensor, last.input[1]
                break
    return None


def _ancestors(tensor: str, producers: dict[str, onnx.NodeProto]) -> set[str]:
    seen, todo = {tensor}, [tensor]
    while todo:
        node = producers.get(todo.pop())
        for name in node.input if node is not None else ():
            if name and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def split_flow(frontend: Path, latent: str, durations: str | None) -> FlowSplit | None:
    """The cached encoder/flow split of `frontend` (built once per file), or None."""
    stem = frontend.with_suffix("")
    encoder, flow = Path(f"{stem}.encoder.onnx"), Path(f"{stem}.flow.onnx")
    meta_path = Path(f"{stem}.flow.json")
    source = frontend.stat()
    stamp = [source.st_size, source.st_mtime_ns]
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == FLOW_FORMAT and meta.get("source") == stamp:
            if meta.get("prior") is None:
                return None
            if encoder.is_file() and flow.is_file():
                return FlowSplit(encoder, flow, meta["prior"], meta["mask"], meta["context"])
    except (OSError, ValueError):
        pass
    result = _build(frontend, latent, durations, encoder, flow)
    record = {"format": FLOW_FORMAT, "source": stamp, "prior": None}
    if result is not None:
        record.update(prior=result.prior, mask=result.mask, context=result.context)
    meta_path.write_text(json.dumps(record))
    return result


def _build(
    frontend: Path, latent: str, durations: str | None, encoder: Path, flow: Path
) -> FlowSplit | None:
    try:
        model = onnx.load(str(frontend))
    except Exception as exc:  # onnx raises several unrelated types for bad files
        log.warning("flow split: cannot read %s: %s", frontend.name, exc)
        return None
    cut = find_flow_cut(model, latent)
    if cut is None:
        log.info("%s: no flow found; the frontend runs whole", frontend.name)
        return None
    prior, mask = cut
    inputs = [i.name for i in model.graph.input]
    with tempfile.TemporaryDirectory(dir=frontend.parent) as tmp:
        encoder_tmp, flow_tmp = Path(tmp) / "encoder.onnx", Path(tmp) / "flow.onnx"
        extractor = onnx.utils.Extractor(model)
        outputs = [prior, mask] + ([durations] if durations else [])
        flow_model = extractor.extract_model([prior, mask], [latent])
        try:
            onnx.checker.check_model(flow_model)  # the flow needs nothing but its cut
        except onnx.checker.ValidationError as exc:
            log.info("%s: the flow needs more than its cut (%s); runs whole", frontend.name, exc)
            return None
        context = receptive_frames(flow_model, prior)
        if context is None:
            log.info("%s: the flow's receptive field is unreadable; runs whole", frontend.name)
            return None
        onnx.save(extractor.extract_model(inputs, outputs), str(encoder_tmp))
        onnx.save(flow_model, str(flow_tmp))
        os.replace(encoder_tmp, encoder)
        os.replace(flow_tmp, flow)
    log.info("%s: flow split at %s (receptive field %d frames)", frontend.name, prior, context)
    return FlowSplit(encoder, flow, prior, mask, context)


class FlowLatent:
    """z of one unit, made by the flow when the decoder first reads it.

    Reads are `z[:, :, start:stop]` slices (ChunkedDecoder.stream). Only frames
    [lo, hi) are ever read. With `small_first` the first read runs the flow over that
    window alone (plus context), and the next over the rest: the first sound waits for
    the least flow; otherwise the first read runs it over all of [lo, hi) at once."""

    def __init__(
        self,
        run: FlowRun,
        prior: np.ndarray,
        mask: np.ndarray,
        context: int,
        reads: tuple[int, int],
        small_first: bool,
    ) -> None:
        self._run, self._prior, self._mask, self._context = run, prior, mask, context
        self.shape = prior.shape
        self._lo, self._hi = max(reads[0], 0), min(reads[1], prior.shape[2])
        self._small_first = small_first
        self._z = np.zeros(prior.shape, dtype=np.float32)
        self._made: tuple[int, int] | None = None  # exact frames [from, to)
        self.spent_frames = 0  # frames the flow ran over, context included
        self.spent_s = 0.0

    def __getitem__(self, key: tuple[slice, slice, slice]) -> np.ndarray:
        frames = key[2]
        start, stop = max(frames.start or 0, 0), min(frames.stop, self.shape[2])
        if self._made is None:
            if self._small_first:
                self._make(start, stop)
            else:
                self._make(min(start, self._lo), max(stop, self._hi))
        else:
            made_from, made_to = self._made
            if start < made_from:
                self._make(min(start, self._lo), made_from)
            if stop > made_to:
                self._make(made_to, max(stop, self._hi))
        return self._z[key]

    def whole_s(self) -> float:
        """Seconds one flow run over every frame read would take, from the runs so far
        (the flow's cost is linear in frames): what a unit's first turn costs when it
        does not start small."""
        if not self.spent_frames:
            return 0.0
        frames = min(self._hi + self._context, self.shape[2]) - max(self._lo - self._context, 0)
        return self.spent_s * frames / self.spent_frames

    def _make(self, start: int, stop: int) -> None:
        """Run the flow over [start, stop) with its context; keep those frames."""
        frames = self.shape[2]
        lo, hi = max(start - self._context, 0), min(stop + self._context, frames)
        if hi <= lo:
            return
        started = time.perf_counter()
        z = self._run(self._prior[:, :, lo:hi], self._mask[:, :, lo:hi])
        self.spent_s += time.perf_counter() - started
        self._z[:, :, start:stop] = z[:, :, start - lo : stop - lo]
        self.spent_frames += hi - lo
        if self._made is None:
            self._made = (start, stop)
        else:  # pieces adjoin what was made: the made span stays contiguous
            self._made = (min(self._made[0], start), max(self._made[1], stop))
