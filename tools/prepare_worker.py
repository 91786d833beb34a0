"""The daemon's background INT8 preparation (daemon/int8auto.py starts it): the daemon's
configuration as JSON on stdin; progress as JSON lines on stdout ({"progress": 0.42}),
other lines are messages. Exit 0 once a verdict (pass or fail) is written.

It measures less than `magpie-tts prepare` (engine.int8_gate_sentences held-out
sentences, half the calibration sentences, 3 race rounds, the first candidate within
every bound), and WER only where the
recognizer (the test extra) is installed; without it the gate says so and judges by
DNSMOS, log-mel distance and hiss.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys

from magpie_tts.daemon.config import Config
from magpie_tts.daemon.voices import engine_config
from magpie_tts.engine import CacheConfig, StreamingSynthesizer, load_voice, split_voice
from magpie_tts.engine.int8 import prepare_int8
from magpie_tts.engine.int8.prepare import PrepareSize

CALIBRATION_SENTENCES = 8
RACE_ROUNDS = 3


def _say(message: str) -> None:
    print(message, flush=True)


def _fraction(done: float) -> None:
    print(json.dumps({"progress": round(done, 3)}), flush=True)


def main() -> int:
    # Stopped by the daemon (SIGTERM): unwind, so the temp folders are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = Config.model_validate_json(sys.stdin.read())
    voice = load_voice(config.engine.voice)
    split = split_voice(voice, config.engine.state_dir)
    # One thread: the worker runs on one idle core (its parent pinned it there).
    runtime = dataclasses.replace(engine_config(config).runtime, provider="cpu", intra_op_threads=1)
    reference = StreamingSynthesizer(
        voice,
        dataclasses.replace(
            engine_config(config),
            runtime=runtime,
            precision="fp32",
            cache=CacheConfig(memory_bytes=0),
            workers=0,
        ),
    )
    gate = config.engine.int8_gate_sentences
    size = PrepareSize(
        calibration=min(CALIBRATION_SENTENCES, 2 * gate),
        gate=gate,
        race_rounds=RACE_ROUNDS,
        first_fit=True,
    )
    report = prepare_int8(reference, split, None, True, _say, size, _fraction)
    _say(f"INT8 gate: {report['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
