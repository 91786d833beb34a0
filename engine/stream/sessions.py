"""A voice's sessions, loaded: what a synthesizer runs on.

From a Voice and an EngineConfig: the voice split into frontend and decoder graphs (kept
in the cache dir), the execution provider, the precision of each graph and why, the
encoder/flow split of the frontend, and the onnxruntime sessions of every lane — the
frontend's (encoder and flow) and the decoder's, behind one ChunkedDecoder.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import VoiceError
from ..graph.flow_split import FlowSplit, Probes, split_flow
from ..graph.split import split_voice
from ..precision import (
    disabled_optimizers,
    expands,
    select_decoder,
    select_frontend,
    single_thread_decoder,
)
from ..runtime import (
    ProviderChoice,
    RuntimeConfig,
    choose_provider,
    confirm_provider,
    make_session,
    provider_name,
)
from ..voice import Voice
from .config import EngineConfig
from .decoder import DEFAULT_CONTEXT, ChunkedDecoder, bucket_lengths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VoiceSessions:
    """Everything a voice's synthesizer runs on. Lane 0's sessions use every thread;
    each worker lane's a share of them (turns.py)."""

    latent_name: str  # z: the frontend's output, the decoder's input
    durations_name: str | None  # frames per phoneme id, where the frontend tells them
    choice: ProviderChoice
    runtime: RuntimeConfig  # its INT8 graphs in the measured layout
    precision: str  # the decoder's
    precision_reason: str
    frontend_precision: str
    expands: bool  # INT8's pause hiss gated (expander.py)
    graph_paths: dict[str, Path]  # "frontend", "decoder": the graphs loaded
    flow: FlowSplit | None  # the encoder/flow split; None: the frontend runs whole
    precisions: dict[str, str]  # what runs each graph, as status reports it
    precisions_key: str  # that and the seed, the phrase cache's key for it
    context: int  # frames of context each side of a decoder window
    frontends: list[Any]  # per lane: the encoder (or the whole frontend)
    flows: list[Any]  # per lane, like the frontends (none: the frontend runs whole)
    providers: dict[str, str]  # what really runs each graph
    decoder: ChunkedDecoder  # over the decoder sessions of every lane
    workers: int  # worker lanes beside lane 0 (CPU only)


def load_sessions(voice: Voice, config: EngineConfig, probes: Probes) -> VoiceSessions:
    """The voice's sessions for `config`; VoiceError where a graph does not load.
    `probes`: the inputs the flow split is checked on when it is built (graph/flow_split.py)."""
    split = split_voice(voice, config.cache_dir)
    choice = choose_provider(config.runtime)
    decoder_path, precision, precision_reason = select_decoder(
        split, config.precision, choice.used, config.runtime.trt_fp16
    )
    frontend_path, frontend_precision = select_frontend(split, precision)
    # The runtime this voice's sessions get: its INT8 graphs in the measured layout.
    runtime = replace(config.runtime, disabled_optimizers=disabled_optimizers(split, precision))
    flow = (
        split_flow(frontend_path, split.latent_name, split.durations_name, probes)
        if config.windowed_flow
        else None
    )
    encoder_path = flow.encoder if flow else frontend_path
    if config.seed is not None and flow is None:
        log.warning(
            "engine.seed is set, but the frontend runs whole and draws its own noise: "
            "audio is not reproducible (needs the windowed flow)"
        )
    # Context each side of a window: the decoder's own receptive field where the graph
    # tells it (11 frames for Piper medium voices), so no frame is decoded in vain.
    context = config.context
    if context is None:
        context = split.context_frames or DEFAULT_CONTEXT
    buckets = bucket_lengths(config.schedule, context)
    profile = (split.latent_name, buckets[0], buckets[-1], buckets[-1])
    # Worker lanes only on CPU: a GPU runs one stream's window at a time anyway.
    workers = config.workers if choice.used == "cpu" else 0
    threads = runtime.intra_op_threads or os.cpu_count() or 1
    share = max(1, threads // max(workers, 1))
    single = replace(runtime, intra_op_threads=share)
    # One-thread sessions run the decoder's float convs blocked (precision.py); a
    # several-thread one the graph as it is.
    on_cpu = choice.used == "cpu"
    main_path = single_thread_decoder(decoder_path) if on_cpu and threads == 1 else decoder_path
    lane_path = single_thread_decoder(decoder_path) if on_cpu and share == 1 else decoder_path
    try:
        frontend = make_session(encoder_path, runtime, choice, "frontend")
        flows = [
            make_session(flow.flow, lane, choice, "frontend")
            for lane in ([runtime] + [single] * workers if flow else [])
        ]
        decoder_session = make_session(main_path, runtime, choice, "decoder", profile)
        lanes = [
            (
                make_session(encoder_path, single, choice, "frontend"),
                make_session(lane_path, single, choice, "decoder", profile),
            )
            for _ in range(workers)
        ]
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise VoiceError(f"cannot load voice {voice.model_path}: {exc}") from exc
    # What really runs each graph (the frontend never goes to TensorRT).
    providers = {
        "frontend": provider_name(frontend),
        "decoder": confirm_provider(choice, decoder_session),
    }
    decoder = ChunkedDecoder(
        decoder_session,
        choice.used,
        voice.hop_length,
        config.schedule,
        context,
        voice.sample_rate,
        [decoder for _, decoder in lanes],
    )
    return VoiceSessions(
        latent_name=split.latent_name,
        durations_name=split.durations_name,
        choice=choice,
        runtime=runtime,
        precision=precision,
        precision_reason=precision_reason,
        frontend_precision=frontend_precision,
        expands=expands(split, precision),
        graph_paths={"frontend": frontend_path, "decoder": decoder_path},
        flow=flow,
        # The phrase cache keys audio by what runs each graph and the seed (a seeded
        # phrase is the audio that seed makes).
        precisions={"frontend": frontend_precision, "decoder": precision},
        precisions_key=f"{precision}/frontend {frontend_precision}"
        + (f"/seed {config.seed}" if config.seed is not None and flow else ""),
        context=context,
        frontends=[frontend, *(front for front, _ in lanes)],
        flows=flows,
        providers=providers,
        decoder=decoder,
        workers=workers,
    )
