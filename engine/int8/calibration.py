"""Calibration and gate material: the sentences, their latents as streaming makes them
(seeded noise, so a prepare repeats and the gate's draws are paired), and the
calibration windows cut from them."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..graph.flow_split import split_flow
from ..runtime import RuntimeConfig, choose_provider, make_session
from ..stream.latent import unit_noise
from ..stream.synth import StreamingSynthesizer
from ..values import SynthesisOptions

log = logging.getLogger(__name__)

# Noise is seeded (unit_noise): calibration latents repeat from prepare to prepare,
# and draw k of the fp32 and the INT8 path is the same noise (a paired comparison).
CALIBRATION_SEED = 0
CALIBRATION_WINDOW = 96  # frames: the steady-state decoder window (64 core + 2 × 16)

CALIBRATION_TEXTS = (
    "Good morning! The coffee machine is warming up and will be ready in two minutes.",
    "I could not find any song called that, but here is something similar you might like.",
    "Your flight to Denver departs at seven fifteen from gate twenty three.",
    "The living room is at twenty one degrees and the humidity is forty percent.",
    "Sorry, I did not catch that. Could you say it again a little more slowly?",
    "Reminder: take the bins out tonight, because collection is early tomorrow.",
    "There are three timers running: pasta, eggs, and the laundry downstairs.",
    "Playing the latest episode of your favourite podcast from the beginning.",
    "Quiet hours start at ten. I will keep my voice down until seven in the morning.",
    "The garage door has been open for fifteen minutes. Should I close it?",
    "Happy birthday! Would you like me to play a song to celebrate?",
    "Traffic is heavy on the bridge, so leaving now gets you there by half past eight.",
    "Your order of batteries, light bulbs and a new kettle shipped this afternoon.",
    "It will be windy tonight with gusts up to fifty kilometers per hour.",
    "Okay, calling Mum on speaker. Say stop at any time to hang up.",
    "The kids' bedtime routine starts now: lights dim, white noise on, doors locked.",
)

GATE_TEXTS = (
    "Your timer for the pasta is done.",
    "It is twenty two degrees and sunny in Boston right now.",
    "I added milk and eggs to your shopping list.",
    "The next train to the city leaves at six thirty.",
    "Turning off the lights in the living room.",
    "You have three new messages from your sister.",
    "Tomorrow will be cloudy with a chance of rain in the afternoon.",
    "Playing relaxing music in the kitchen.",
    "The front door is locked and the alarm is set.",
    "Your package will arrive on Friday between noon and four.",
    "Set an alarm for seven in the morning on weekdays.",
    "The oven has reached two hundred degrees.",
    "Do you want me to read the rest of the article?",
    "Battery is low on the bedroom smoke detector.",
    "Here is a quick recipe for tomato soup with basil.",
    "Your meeting with the dentist was moved to Thursday.",
    "Good night. I will turn everything off in five minutes.",
    "The washing machine finished its cycle a moment ago.",
    "Wind speeds will reach forty miles per hour near the coast.",
    "I have paused the movie. Say resume when you are ready.",
    "Welcome home! The heating is on and dinner is in the oven.",
    "Sorry, the shop closes at nine on Sundays.",
)


class Latents:
    """z for each clause of a text from one frontend file, as streaming makes them: split
    at its flow, with noise seeded per unit (two frontends given one seed hear the same
    noise: an INT8 path is compared with fp32 on equal draws, and a prepare repeats),
    or whole where the graph does not split (its own noise)."""

    def __init__(self, path: Path, synth: StreamingSynthesizer) -> None:
        self._synth = synth
        self._split = split_flow(path, synth.latent_name, synth.durations_name, synth.flow_probes)
        if self._split is None:
            log.warning("%s does not split: the gate's draws are not paired", path.name)
        runtime = RuntimeConfig(provider="cpu")
        choice = choose_provider(runtime)
        parts = (self._split.encoder, self._split.flow) if self._split else (path,)
        self._sessions = [make_session(part, runtime, choice, "frontend") for part in parts]

    def __call__(self, text: str, options: SynthesisOptions, seed: int) -> list[np.ndarray]:
        synth, split, latent = self._synth, self._split, self._synth.latent_name
        zs = []
        for clause in synth.clauses(text):
            ids = synth.phonemizer.clause_ids(clause)
            feeds = synth.frontend_feeds(ids, options)
            if split is None:
                zs.append(self._sessions[0].run([latent], feeds)[0])
                continue
            encoder, flow = self._sessions
            prior, mask, _ = split.encode(encoder, feeds, len(ids), unit_noise(seed, ids))
            zs.append(flow.run([latent], {split.prior: prior, split.mask: mask})[0])
        return zs


def latents_of(path: Path, synth: StreamingSynthesizer) -> Latents:
    """The Latents of a frontend file, reused while the file stays."""
    key = (path, path.stat().st_mtime_ns)
    if key not in _LATENTS:
        _LATENTS[key] = Latents(path, synth)
    return _LATENTS[key]


_LATENTS: dict[tuple[Path, int], Latents] = {}


def latents(
    synth: StreamingSynthesizer, text: str, seed: int = CALIBRATION_SEED
) -> list[np.ndarray]:
    """The synthesizer's (fp32) frontend's z for each clause of text, noise from `seed`."""
    return latents_of(synth.graph_paths["frontend"], synth)(text, SynthesisOptions(), seed)


def calibration_windows(zs: list[np.ndarray], length: int) -> list[np.ndarray]:
    windows = []
    for z in zs:
        for start in range(0, max(1, z.shape[2] - length + 1), length // 2):
            window = z[:, :, start : start + length]
            if window.shape[2] == length:
                windows.append(np.ascontiguousarray(window))
    return windows
