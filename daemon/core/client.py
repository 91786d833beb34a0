"""A client-bound utterance (a Wyoming or HTTP answer): synthesized on its own thread
("magpie-client") into the connection's AudioOut, then concluded through the core. The
thread owns that utterance's cursor and outcome; the speaker's counterpart is speaker.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from magpie_tts.engine import CLIENT, SynthesisOptions

from .speaker import NOTHING_SPEAKABLE
from .stats import Tally
from .utterance import Utterance

if TYPE_CHECKING:
    from .core import Core


def stream_to_client(core: Core, utterance: Utterance) -> None:
    """A client-bound utterance, on its own thread: chunks into its AudioOut."""
    ask, out = utterance.ask, utterance.audio_out
    assert out is not None
    core.check_fail_marker(ask)
    synth = core.registry.get(ask.voice)
    rate = synth.voice.sample_rate
    units = utterance.pending_units(core.limits.stream_idle_s, lambda: utterance.stop.stopped)
    if utterance.stream is not None:
        units = core.slots.paced(utterance, units)  # a slot only while making audio
    chunks = core.registry.failover.stream(
        synth,
        units,
        SynthesisOptions(speed=ask.speed, speaker=ask.speaker),
        utterance.stop,
        cache_use="keep" if ask.cacheable else "auto",
        priority=CLIENT,  # the local speaker's windows come first (engine/stream/turns.py)
    )
    tally = Tally()
    ttfa_ms: float | None = None
    for chunk in chunks:
        pcm = chunk.pcm
        if ask.volume != 1.0:
            pcm = np.clip(pcm * ask.volume, -32768, 32767).astype(np.int16)
        if chunk.words and (timed := getattr(out, "words", None)) is not None:
            timed(chunk.words)  # before the audio they describe (an optional AudioOut part)
        if not out.write(pcm, rate):
            with core.lock:
                utterance.stop_reason = utterance.stop_reason or "client gone"
            utterance.stop.stop()
            break
        tally.add(chunk)
        if ttfa_ms is None:  # the first chunk is out of the daemon
            core.slots.sounding(utterance)
            ttfa_ms = round((core.clock() - ask.received_at) * 1000, 1)
            core.report(utterance, "started", ttfa_ms=ttfa_ms)
    timing = tally.timing(ttfa_ms, tally.audio_s + tally.cached_s)
    if utterance.stop.stopped:
        core.conclude(utterance, "stopped", reason=utterance.stop_reason or "stopped", **timing)
    elif ttfa_ms is None:
        core.conclude(utterance, "error", error=NOTHING_SPEAKABLE)
    else:
        core.finished(utterance, core.client_stats, timing, bool(tally.first_cached))
