"""`magpie-tts bench --formats`: what the audio formats cost, against wav in the same run.

- First bytes per format and sample rate: one client at a time POSTs the medium sentence
  to `/v1/audio/speech` (streamed) and times the first body bytes; every format and rate
  is asked in each round, interleaved, so machine drift hits all alike; the answer is
  dropped once its first bytes are in (the daemon stops that synthesis).
- N WebSocket clients at once (`/v1/audio/speech/ws`): each sends the sentence word by
  word (as an LLM's tokens), then Flush; first audio (from its first Speak) and the
  Flushed event, wav against mp3.
- The CPU cost of encoding one second of audio per format (this process, real speech
  from the daemon's own answer): what each format adds to a synthesis thread.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .bench import TEXTS
from .bench_http import _p95, start_http_magpie
from .processes import stop_all

FORMATS = ("wav", "pcm", "mp3", "opus", "aac", "flac")
RATES = (None, 16000, 48000)  # None: the voice's own (opus: 24000)


async def first_bytes(session: Any, url: str, fmt: str, rate: int | None) -> float:
    body: dict[str, Any] = {"input": TEXTS["medium"], "response_format": fmt}
    if rate is not None:
        body["sample_rate"] = rate
    sent = time.perf_counter()
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        async for chunk in response.content.iter_any():
            if chunk:
                return time.perf_counter() - sent
    raise RuntimeError(f"{fmt}: no audio")


async def http_rounds(url: str, rounds: int) -> dict[tuple[str, int | None], list[float]]:
    import aiohttp

    results: dict[tuple[str, int | None], list[float]] = {}
    async with aiohttp.ClientSession() as session:
        await first_bytes(session, url, "wav", None)  # warm
        for index in range(rounds):
            print(f"formats: round {index + 1}/{rounds}", file=sys.stderr)
            for rate in RATES:
                for fmt in FORMATS:
                    seconds = await first_bytes(session, url, fmt, rate)
                    results.setdefault((fmt, rate), []).append(seconds)
    return results


async def socket_client(session: Any, url: str, start: asyncio.Event) -> tuple[float, float]:
    """(first audio, Flushed) in seconds from the first Speak."""
    async with session.ws_connect(url) as ws:
        await start.wait()
        began = time.perf_counter()
        for word in TEXTS["medium"].split(" "):
            await ws.send_json({"type": "Speak", "text": word + " "})
        await ws.send_json({"type": "Flush"})
        first = None
        async for message in ws:
            if message.type.name == "BINARY" and first is None:
                first = time.perf_counter() - began
            elif message.type.name == "TEXT":
                event = json.loads(message.data)
                if event["type"] == "Flushed":
                    assert first is not None
                    return first, time.perf_counter() - began
                raise RuntimeError(f"WebSocket: {event}")
    raise RuntimeError("WebSocket closed before Flushed")


async def socket_load(url: str, clients: int) -> list[tuple[float, float]]:
    import aiohttp

    start = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(socket_client(session, url, start)) for _ in range(clients)]
        await asyncio.sleep(0.5)  # all connected
        start.set()
        return list(await asyncio.gather(*tasks))


def encoding_cost(pcm: np.ndarray, source_rate: int, repeats: int = 5) -> dict[str, float]:
    """CPU ms to encode one second of audio, per format (median of `repeats`), in the
    chunk sizes the daemon makes (~0.2 s)."""
    from magpie_tts.daemon.frontends.encoding import open_output

    data = pcm.astype("<i2").tobytes()
    step = int(0.2 * source_rate) * 2
    costs = {}
    for fmt in FORMATS:
        runs = []
        for _ in range(repeats):
            began = time.process_time()
            out = open_output(fmt, source_rate)
            for start in range(0, len(data), step):
                out.write(data[start : start + step])
            out.finish()
            runs.append((time.process_time() - began) / (len(pcm) / source_rate))
        costs[fmt] = statistics.median(runs) * 1000
    return costs


def first_chunk_cost(pcm: np.ndarray, source_rate: int, repeats: int = 20) -> dict[Any, float]:
    """Wall ms from the first 0.2 s chunk in to the first bytes out (opening the encoder
    included), per format and rate: what encoding adds to first bytes, free of the
    machine's synthesis noise."""
    from magpie_tts.daemon.frontends.encoding import open_output

    chunk = pcm[: int(0.2 * source_rate)].astype("<i2").tobytes()
    costs: dict[Any, float] = {}
    for rate in RATES:
        for fmt in FORMATS:
            runs = []
            for _ in range(repeats):
                began = time.perf_counter()
                out = open_output(fmt, source_rate, rate)
                while not out.write(chunk):  # (every format has bytes after one chunk)
                    pass
                runs.append(time.perf_counter() - began)
                out.finish()
            costs[(fmt, rate)] = statistics.median(runs) * 1000
    return costs


def speech_pcm(url: str) -> np.ndarray:
    import urllib.request

    body = json.dumps({"input": TEXTS["long"], "response_format": "pcm"}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as reply:
        return np.frombuffer(reply.read(), "<i2")


def run_formats_bench(config: Any, rounds: int, clients: int = 10) -> int:
    from magpie_tts.engine import load_voice, split_voice

    voice = load_voice(config.engine.voice)
    split_voice(voice, config.engine.state_dir)
    folder = Path(tempfile.mkdtemp(prefix="magpie-bench-formats-"))
    procs, url = start_http_magpie(folder, config.engine.state_dir)
    try:
        firsts = asyncio.run(http_rounds(url, rounds))
        sockets: dict[str, list[tuple[float, float]]] = {}
        for index in range(min(rounds, 3)):  # interleaved, as above
            for fmt in ("wav", "mp3"):
                print(
                    f"formats: {clients} WebSocket clients, {fmt}, round {index + 1}",
                    file=sys.stderr,
                )
                ws_url = url.replace("http://", "ws://") + f"/ws?encoding={fmt}"
                sockets.setdefault(fmt, []).extend(asyncio.run(socket_load(ws_url, clients)))
        pcm = speech_pcm(url)
    finally:
        stop_all(procs)
    costs = encoding_cost(pcm, voice.sample_rate)
    firsts_added = first_chunk_cost(pcm, voice.sample_rate)
    print(report(firsts, sockets, costs, rounds, clients, len(pcm) / voice.sample_rate))
    print("\nWall ms from the first 0.2 s chunk to the first bytes (encoder opened), median of 20:")
    for rate in RATES:
        cells = "  ".join(f"{fmt} {firsts_added[(fmt, rate)]:.2f}" for fmt in FORMATS)
        print(f"{_rate(rate):>13}: {cells}")
    return 0


def report(
    firsts: dict[tuple[str, int | None], list[float]],
    sockets: dict[str, list[tuple[float, float]]],
    costs: dict[str, float],
    rounds: int,
    clients: int,
    audio_s: float,
) -> str:
    lines = [
        f"\nFirst bytes, /v1/audio/speech streamed, medium sentence, one client, {rounds} "
        "rounds (ms): median and min, each against wav at the same rate (median of the "
        "rounds' differences; difference of the mins)",
        f"{'format':<6} {'rate':>6} {'median':>8} {'vs wav':>8} {'min':>8} {'vs wav':>8}",
    ]
    for rate in RATES:
        wav = [v * 1000 for v in firsts[("wav", rate)]]
        for fmt in FORMATS:
            values = [v * 1000 for v in firsts[(fmt, rate)]]
            delta = statistics.median(a - b for a, b in zip(values, wav, strict=True))
            lines.append(
                f"{fmt:<6} {rate or 'voice':>6} {statistics.median(values):8.1f} {delta:+8.1f} "
                f"{min(values):8.1f} {min(values) - min(wav):+8.1f}"
            )
    lines.append(
        f"\n{clients} WebSocket clients at once, the sentence word by word then Flush "
        f"(ms from the first Speak), {len(sockets['wav']) // clients} rounds: median / p95"
    )
    for fmt, results in sockets.items():
        first = [f * 1000 for f, _ in results]
        done = [d * 1000 for _, d in results]
        lines.append(
            f"{fmt:<6} first audio {statistics.median(first):7.1f} / {_p95(first):7.1f}   "
            f"Flushed {statistics.median(done):7.1f} / {_p95(done):7.1f}"
        )
    lines.append(f"\nCPU to encode 1 s of audio ({audio_s:.1f} s of speech, median of 5), ms:")
    lines.append("  ".join(f"{fmt} {ms:.2f}" for fmt, ms in costs.items()))
    return "\n".join(lines)


def _rate(rate: int | None) -> str:
    return "voice's rate" if rate is None else f"{rate} Hz"
