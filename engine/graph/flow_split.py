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

The encoder draws no noise of its own: onnxruntime's random ops cannot be seeded per
run, so the same text would never sound the same twice, nor would a test's. It outputs
the prior's mean and scale (z_p = mean + noise × scale is made by the caller), and
every other noise (the stochastic duration predictor's) becomes an input of a shape
learned from probe runs: (fixed dims..., phoneme ids). With noise off the split
encoder and flow must reproduce the whole frontend, or the frontend runs whole.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

from ..runtime import plain_options
from .identities import drop_identity_arithmetic
from .layernorm import fuse_layer_norms
from .nodes import consumers, producers
from .split import receptive_frames

log = logging.getLogger(__name__)

# 2: the encoder takes its noise as inputs; 3: the flow without no-ops; 4: the encoder's
# layer norms fused
FLOW_FORMAT = 4
Probe = tuple[int, dict[str, np.ndarray]]  # phoneme ids in it, frontend feeds (noise off)
Probes = Callable[[], list[Probe]]  # called only when a split is built
PRIOR_SCALE = "magpie_prior_scale"


@dataclass(frozen=True)
class FlowSplit:
    encoder: Path  # ids, noises → prior mean and scale, mask (and durations)
    flow: Path  # z_p, mask → z
    prior: str  # z_p, the flow's input
    mask: str
    context: int  # frames of z_p on either side that reach one frame of z
    mean: str  # z_p = mean + standard normal noise × scale
    scale: str
    noises: tuple[tuple[str, tuple[int, ...]], ...]  # encoder inputs: (name, dims before ids)

    def encode(
        self,
        session: Any,
        feeds: dict[str, np.ndarray],
        ids: int,
        rng: np.random.Generator,
        extra: tuple[str, ...] = (),
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """(z_p, mask, the `extra` outputs) of an encoder session on frontend feeds for
        `ids` phoneme ids, every noise drawn from `rng`."""
        noises = {
            name: rng.standard_normal((*dims, ids), dtype=np.float32) for name, dims in self.noises
        }
        names = [self.mean, self.scale, self.mask, *extra]
        mean, scale, mask, *rest = session.run(names, {**feeds, **noises})
        return mean + rng.standard_normal(mean.shape, dtype=np.float32) * scale, mask, rest


@dataclass(frozen=True)
class PriorCut:
    prior: str  # z_p
    mask: str
    noise: str  # the output of the RandomNormalLike that draws z_p's noise
    factors: tuple[str, ...]  # what that noise is multiplied by (exp(logs_p), noise scale)
    mean: str  # what the scaled noise is added to (m_p)


def find_flow_cut(model: onnx.ModelProto, latent: str) -> PriorCut | None:
    """Where a VITS frontend whose output is z splits at its flow, or None."""
    graph = model.graph
    made_by, read_by = producers(graph), consumers(graph)
    last = made_by.get(latent)
    if last is None or last.op_type != "Mul" or len(last.input) != 2:
        return None
    upstream = _ancestors(last.input[0], made_by)
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            continue
        tensor, factors = node.output[0], []
        while True:  # noise × exp(logs_p) × noise scale, then + m_p
            following = read_by.get(tensor, [])
            if len(following) != 1 or following[0].op_type not in ("Mul", "Add"):
                break
            step = following[0]
            other = [name for name in step.input if name != tensor]
            if len(other) != 1:
                break
            tensor = step.output[0]
            if step.op_type == "Mul":
                factors.append(other[0])
                continue
            if tensor in upstream and factors:
                return PriorCut(tensor, last.input[1], node.output[0], tuple(factors), other[0])
            break
    return None


def _ancestors(tensor: str, made_by: dict[str, onnx.NodeProto]) -> set[str]:
    seen, todo = {tensor}, [tensor]
    while todo:
        node = made_by.get(todo.pop())
        for name in node.input if node is not None else ():
            if name and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def split_files(frontend: Path) -> tuple[Path, Path, Path]:
    """(encoder, flow, record) that split_flow keeps beside `frontend`."""
    stem = frontend.with_suffix("")
    return Path(f"{stem}.encoder.onnx"), Path(f"{stem}.flow.onnx"), Path(f"{stem}.flow.json")


def remove_frontend(frontend: Path) -> None:
    """Delete a frontend graph and its split."""
    for path in (frontend, *split_files(frontend)):
        path.unlink(missing_ok=True)


def split_flow(
    frontend: Path, latent: str, durations: str | None, probes: Probes
) -> FlowSplit | None:
    """The cached encoder/flow split of `frontend` (built once per file), or None.
    `probes`: two or more inputs of different lengths, to learn and check the split
    (made only when it is built)."""
    encoder, flow, meta_path = split_files(frontend)
    source = frontend.stat()
    stamp = [source.st_size, source.st_mtime_ns]
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == FLOW_FORMAT and meta.get("source") == stamp:
            if meta.get("prior") is None:
                return None
            if encoder.is_file() and flow.is_file():
                noises = tuple((name, tuple(dims)) for name, dims in meta["noises"])
                return FlowSplit(
                    encoder,
                    flow,
                    meta["prior"],
                    meta["mask"],
                    meta["context"],
                    meta["mean"],
                    meta["scale"],
                    noises,
                )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        result = _build(frontend, latent, durations, encoder, flow, probes())
    except (OSError, MemoryError) as exc:  # this load's trouble, not the graph's: not kept
        log.warning("%s: flow split not built (%s); the frontend runs whole", frontend.name, exc)
        return None
    record: dict[str, Any] = {"format": FLOW_FORMAT, "source": stamp, "prior": None}
    if result is not None:
        record.update(
            prior=result.prior,
            mask=result.mask,
            context=result.context,
            mean=result.mean,
            scale=result.scale,
            noises=[[name, list(dims)] for name, dims in result.noises],
        )
    meta_path.write_text(json.dumps(record))
    return result


def _build(
    frontend: Path,
    latent: str,
    durations: str | None,
    encoder: Path,
    flow: Path,
    probes: list[Probe],
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
    noises = [
        n for n in model.graph.node if n.op_type == "RandomNormalLike" and n.output[0] != cut.noise
    ]
    scale = cut.factors[0]
    for index, factor in enumerate(cut.factors[1:]):  # one tensor: the noise's whole scale
        product = f"{PRIOR_SCALE}_{index}" if index < len(cut.factors) - 2 else PRIOR_SCALE
        model.graph.node.append(onnx.helper.make_node("Mul", [scale, factor], [product]))
        model.graph.value_info.append(  # the extractor looks tensors up here
            onnx.helper.make_tensor_value_info(product, onnx.TensorProto.FLOAT, None)
        )
        scale = product
    inputs = [i.name for i in model.graph.input] + [n.output[0] for n in noises]
    with tempfile.TemporaryDirectory(dir=frontend.parent) as tmp:
        encoder_tmp, flow_tmp = Path(tmp) / "encoder.onnx", Path(tmp) / "flow.onnx"
        extractor = onnx.utils.Extractor(model)
        outputs = [cut.mean, scale, cut.mask] + ([durations] if durations else [])
        flow_model = extractor.extract_model([cut.prior, cut.mask], [latent])
        try:
            onnx.checker.check_model(flow_model)  # the flow needs nothing but its cut
        except onnx.checker.ValidationError as exc:
            log.info("%s: the flow needs more than its cut (%s); runs whole", frontend.name, exc)
            return None
        context = receptive_frames(flow_model, cut.prior)
        if context is None:
            log.info("%s: the flow's receptive field is unreadable; runs whole", frontend.name)
            return None
        try:  # onnxruntime raises its own untyped errors
            noise_dims = _noise_dims(extractor, [n.output[0] for n in noises], probes)
            if noise_dims is None:
                log.info("%s: a noise's shape is not (dims..., ids); runs whole", frontend.name)
                return None
            encoder_model = extractor.extract_model(inputs, outputs)
            split = FlowSplit(
                encoder, flow, cut.prior, cut.mask, context, cut.mean, scale, tuple(noise_dims)
            )
            # The encoder with its layer norms fused and the flow without its no-ops, where
            # the probes agree (they always have on VITS); else the plain graphs.
            fused, lean = onnx.ModelProto(), onnx.ModelProto()
            fused.CopyFrom(encoder_model)
            lean.CopyFrom(flow_model)
            encoders = [fused, encoder_model] if fuse_layer_norms(fused) else [encoder_model]
            flows = [lean, flow_model] if drop_identity_arithmetic(lean) else [flow_model]
            for encoder_candidate, flow_candidate in itertools.product(encoders, flows):
                onnx.save(encoder_candidate, str(encoder_tmp))
                onnx.save(flow_candidate, str(flow_tmp))
                try:  # a rewritten graph onnxruntime refuses is a disagreement too
                    error = _mismatch(
                        frontend, latent, replace(split, encoder=encoder_tmp, flow=flow_tmp), probes
                    )
                except (OSError, MemoryError):
                    raise
                except Exception as exc:
                    error = f"cannot run it: {exc}"
                if error is None:
                    break
        except (OSError, MemoryError):
            raise
        except Exception as exc:  # the graph's own trouble: remembered beside it
            error = f"cannot run it: {exc}"
        if error is not None:
            log.info("%s: split rejected (%s); the frontend runs whole", frontend.name, error)
            return None
        os.replace(encoder_tmp, encoder)
        os.replace(flow_tmp, flow)
    log.info("%s: flow split at %s (receptive field %d frames)", frontend.name, cut.prior, context)
    return split


def _noise_dims(
    extractor: onnx.utils.Extractor, names: list[str], probes: list[Probe]
) -> list[tuple[str, tuple[int, ...]]] | None:
    """Each noise's dims before its last, which must be the probe's phoneme ids."""
    if not names:
        return []
    model = extractor.extract_model([i.name for i in extractor.model.graph.input], names)
    session = ort.InferenceSession(
        model.SerializeToString(), plain_options(), providers=["CPUExecutionProvider"]
    )
    found: dict[str, set[tuple[int, ...]]] = {name: set() for name in names}
    for ids, feeds in probes:
        for name, value in zip(names, session.run(names, feeds), strict=True):
            if value.shape[-1] != ids:
                return None
            found[name].add(tuple(value.shape[:-1]))
    if any(len(shapes) != 1 for shapes in found.values()):
        return None
    return [(name, found[name].pop()) for name in names]


def _mismatch(frontend: Path, latent: str, split: FlowSplit, probes: list[Probe]) -> str | None:
    """None if encoder + flow give the whole frontend's z with noise off, else why not."""
    cpu = ["CPUExecutionProvider"]
    whole = ort.InferenceSession(str(frontend), plain_options(), providers=cpu)
    encoder = ort.InferenceSession(str(split.encoder), plain_options(), providers=cpu)
    flow = ort.InferenceSession(str(split.flow), plain_options(), providers=cpu)
    rng = np.random.default_rng(0)
    for ids, feeds in probes:
        reference = whole.run([latent], feeds)[0]
        prior, mask, _ = split.encode(encoder, feeds, ids, rng)  # noise scale 0: the mean
        z = flow.run([latent], {split.prior: prior, split.mask: mask})[0]
        if z.shape != reference.shape:
            return f"z shape {z.shape} vs the whole frontend's {reference.shape}"
        error = float(np.max(np.abs(z - reference)))
        if error > 1e-3:
            return f"max |Δz| {error:.2g} against the whole frontend"
    return None
