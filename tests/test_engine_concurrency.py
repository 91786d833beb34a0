"""Many streams on one synthesizer: turns go to the most urgent stream, and what each
stream hears is what it would hear alone (noise off), to the decoder's exactness: a
stream's windows shrink while others wait (decoder.py), and windows cut at other frames
differ at float-noise level, or, where one plan pads a unit's end by a few frames, at
83-91 dB SNR (a few LSB of 16-bit audio)."""

from __future__ import annotations

import threading
import time

import numpy as np
from magpie_tts.engine import SynthesisOptions
from magpie_tts.engine.turns import CLIENT, SPEAKER, Pace, Turns

QUIET = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
TEXTS = [
    "The garage door is closed, and the porch light is on for the evening.",
    "It will rain after lunch. Take an umbrella when you go out.",
    "Your package was delivered to the front porch at half past two.",
]


def test_waiting_streams_are_served_most_urgent_first() -> None:
    turns = Turns()
    served: list[str] = []
    busy = Pace(CLIENT)
    behind = Pace(CLIENT)
    behind.made(0.1)  # 0.1 s ahead of its clock, well behind `ahead`
    ahead = Pace(CLIENT)
    ahead.made(5.0)
    speaker_ahead = Pace(SPEAKER)
    speaker_ahead.made(0.3)  # the speaker's margin: more urgent than a client 0.1 s ahead
    first_client, first_speaker = Pace(CLIENT), Pace(SPEAKER)  # no audio yet

    def wait_turn(name: str, pace: Pace) -> threading.Thread:
        def run() -> None:
            with turns.turn(pace):
                served.append(name)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    with turns.turn(busy):
        threads = []
        for name, pace in [
            ("ahead", ahead),
            ("behind", behind),
            ("first-client", first_client),
            ("speaker-ahead", speaker_ahead),
            ("first-speaker", first_speaker),
        ]:
            threads.append(wait_turn(name, pace))
            while turns.waiting < len(threads):
                time.sleep(0.001)
    for thread in threads:
        thread.join(5)
    # about to run dry first (an underrun is heard), then first sound, then the rest
    assert served == ["speaker-ahead", "behind", "first-speaker", "first-client", "ahead"]


def test_concurrent_streams_equal_single_stream_output(synth) -> None:
    alone = [synth.synthesize(text, QUIET) for text in TEXTS]
    together: dict[int, list[np.ndarray]] = {}

    def stream(index: int) -> None:
        units = synth.clauses(TEXTS[index])
        together[index] = [
            c.pcm for c in synth.stream_clauses(units, QUIET, cache_use="bypass", priority=CLIENT)
        ]

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(TEXTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index, expected in enumerate(alone):
        heard = np.concatenate(together[index]).astype(np.float64)
        assert len(heard) == len(expected), TEXTS[index]
        error = heard - expected
        snr = 10 * np.log10(np.sum(expected.astype(np.float64) ** 2) / max(np.sum(error**2), 1))
        assert snr >= 75.0 and np.max(np.abs(error)) <= 8, (TEXTS[index], snr)
