"""`magpie-tts bench --wyoming`: an LLM-like token stream through Wyoming streaming,
into Magpie and into wyoming-piper (same voice), in one interleaved run.

Each run is one Home Assistant streaming reply on a new connection: `synthesize-start`,
then tokens of 1–3 words every 30 ms as `synthesize-chunk`s, then `synthesize` with the
full text (HA does this for old servers), then `synthesize-stop`. Measured from
`synthesize-start`: the first `audio-chunk`, and `synthesize-stopped`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_daemon import start_magpie, wait_listening
from .processes import free_port, stop_all

REPLY = (
    "Sure, I turned off the lights in the kitchen and the living room. "
    "The front door is locked, and the garage door is closed for the night. "
    "Tomorrow morning will be cloudy with a chance of rain after ten, so take an umbrella."
)
TOKEN_EVERY_S = 0.03


def tokens(text: str, seed: int) -> list[str]:
    """1–3 words a token, with their spaces, as an LLM streams them."""
    rng = random.Random(seed)
    words = text.split(" ")
    out, index = [], 0
    while index < len(words):
        take = rng.randint(1, 3)
        out.append(" ".join(words[index : index + take]) + " ")
        index += take
    return out


@dataclass
class Run:
    first_s: float | None
    last_s: float
    audio_starts: int
    audio_s: float


async def stream_once(port: int, seed: int) -> Run:
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import (
        Synthesize,
        SynthesizeChunk,
        SynthesizeStart,
        SynthesizeStop,
        SynthesizeStopped,
    )

    async with AsyncTcpClient("127.0.0.1", port) as client:
        started = time.perf_counter()
        first: float | None = None
        starts = 0
        audio_s = 0.0

        async def read() -> float:
            nonlocal first, starts, audio_s
            while True:
                event = await asyncio.wait_for(client.read_event(), 120)
                if event is None:
                    raise RuntimeError("server closed the connection")
                if AudioStart.is_type(event.type):
                    starts += 1
                elif AudioChunk.is_type(event.type):
                    chunk = AudioChunk.from_event(event)
                    if first is None:
                        first = time.perf_counter() - started
                    audio_s += len(chunk.audio) / (chunk.width * chunk.rate)
                elif SynthesizeStopped.is_type(event.type):
                    return time.perf_counter() - started
                elif event.type == "error":
                    raise RuntimeError(f"server error: {event.data}")

        reader = asyncio.create_task(read())
        await client.write_event(SynthesizeStart().event())
        for token in tokens(REPLY, seed):
            await client.write_event(SynthesizeChunk(text=token).event())
            await asyncio.sleep(TOKEN_EVERY_S)
        await client.write_event(Synthesize(text=REPLY).event())
        await client.write_event(SynthesizeStop().event())
        last = await reader
        return Run(first, last, starts, audio_s)


def start_wyoming_piper(folder: Path, voice: Any) -> tuple[list[subprocess.Popen[bytes]], int]:
    data = folder / "piper-voices"
    data.mkdir()
    (data / f"{voice.name}.onnx").symlink_to(voice.model_path)
    (data / f"{voice.name}.onnx.json").symlink_to(voice.config_path)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "wyoming_piper",
        "--voice",
        voice.name,
        "--uri",
        f"tcp://127.0.0.1:{port}",
        "--data-dir",
        str(data),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    wait_listening(port, proc, "wyoming-piper")
    return [proc], port


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def run_wyoming_bench(config: Any, repeats: int, rounds: int) -> int:
    from magpie_tts.engine import load_voice, split_voice

    voice = load_voice(config.engine.voice)
    split_voice(voice, config.engine.state_dir)
    folder = Path(tempfile.mkdtemp(prefix="magpie-bench-wyoming-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports: dict[str, int] = {}
    try:
        started, ports["magpie"] = start_magpie(folder, config.engine.state_dir, "wyoming")
        procs += started
        if importlib.util.find_spec("wyoming_piper") is None:
            print("wyoming-piper not installed (pip install wyoming-piper): Magpie alone")
        else:
            started, ports["wyoming-piper"] = start_wyoming_piper(folder, voice)
            procs += started
        for port in ports.values():  # warm both: first connection, first sentence
            asyncio.run(stream_once(port, seed=0))
        results: dict[str, list[Run]] = {name: [] for name in ports}
        for round_index in range(rounds):  # interleaved, so machine drift hits both alike
            for name, port in ports.items():
                print(f"round {round_index + 1}/{rounds}: {name}", file=sys.stderr, flush=True)
                for index in range(repeats):
                    results[name].append(asyncio.run(stream_once(port, seed=index)))
    finally:
        stop_all(procs)
    print(report(results, repeats * rounds))
    return 0


def report(results: dict[str, list[Run]], count: int) -> str:
    words = len(REPLY.split())
    lines = [
        f"\nWyoming streaming, {words}-word 3-sentence reply, tokens of 1-3 words every "
        f"{TOKEN_EVERY_S * 1000:.0f} ms; medians of {count} runs (ms from synthesize-start)",
        f"{'system':<15} {'first audio':>11} {'last audio':>10} {'audio s':>8} "
        f"{'audio-starts':>12} {'first/peer':>10}",
    ]
    peer = results.get("wyoming-piper")
    for name, runs in results.items():
        first = _ms([r.first_s for r in runs if r.first_s is not None])
        last = _ms([r.last_s for r in runs])
        ratio = "-"
        if peer and name != "wyoming-piper":
            ratio = f"{first / _ms([r.first_s for r in peer if r.first_s is not None]):.3f}"
        starts = statistics.median(r.audio_starts for r in runs)
        audio = statistics.median(r.audio_s for r in runs)
        lines.append(
            f"{name:<15} {first:>11.1f} {last:>10.1f} {audio:>8.2f} {starts:>12g} {ratio:>10}"
        )
    return "\n".join(lines)
