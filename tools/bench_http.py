"""`magpie-tts bench --concurrency N[,N…]`: N HTTP clients at the same moment, Magpie's
OpenAI speech API against piper-tts's own HTTP server (same voice), in one run.

Every client POSTs the medium sentence at once and reads at real-time pace (a player
with a 1 s buffer: it reads no further ahead than that). Reported per system and N:
mean and p95 first audio (request sent → first audio bytes) of the admitted ones,
refusals (429: past the admitted capacity, or shed), underruns (a stream whose received
audio falls behind its playback clock after the first chunk), and throughput (seconds of
audio delivered per second of wall time). Magpie runs with its default limits: the
capacity it admits (measured from the voice's speed, /health) is printed, and the
levels given are followed by that capacity and two past it, the highest N admitted and
the first refused. Each Magpie's RSS idle (warm, before the first request) and peak
(VmHWM, after the last) is printed too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magpie_tts.daemon.config import resolved_workers

from .bench import TEXTS
from .bench_daemon import start_magpie, wait_listening
from .processes import free_port, stop_all

BYTES_PER_S = 22050 * 2
CLIENT_BUFFER_S = 1.0
HEADER = 44


@dataclass
class Fetch:
    first_s: float
    audio_s: float
    underrun: bool
    wall_s: float
    refused: bool = False


async def fetch(session: Any, url: str, body: dict[str, Any], start: asyncio.Event) -> Fetch:
    await start.wait()
    sent = time.perf_counter()
    first = None
    received = 0
    underrun = False
    async with session.post(url, json=body) as response:
        if response.status == 429:  # refused at once: over capacity, or shed
            return Fetch(time.perf_counter() - sent, 0.0, False, 0.0, refused=True)
        response.raise_for_status()
        async for chunk in response.content.iter_any():
            now = time.perf_counter()
            if first is None:
                first = now
            elif received - HEADER < (now - first) * BYTES_PER_S:
                underrun = True  # the player ran dry before this chunk came
            received += len(chunk)
            ahead = (received - HEADER) / BYTES_PER_S - (time.perf_counter() - first)
            if ahead > CLIENT_BUFFER_S:  # a real-time player does not read further ahead
                await asyncio.sleep(ahead - CLIENT_BUFFER_S)
    assert first is not None
    return Fetch(
        first - sent, (received - HEADER) / BYTES_PER_S, underrun, time.perf_counter() - sent
    )


async def load(url: str, body: dict[str, Any], clients: int) -> tuple[list[Fetch], float]:
    import aiohttp

    start = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(fetch(session, url, body, start)) for _ in range(clients)]
        await asyncio.sleep(0.05)
        began = time.perf_counter()
        start.set()
        results = await asyncio.gather(*tasks)
    return list(results), time.perf_counter() - began


def start_http_magpie(
    folder: Path, state_dir: Path, extra: dict[str, str] | None = None
) -> tuple[list[subprocess.Popen[bytes]], str]:
    settings = {"http__rate_per_minute": "100000", **(extra or {})}
    procs, port = start_magpie(folder, state_dir, "http", settings)
    # readiness: loaded and serving (a self-test over budget on a busy host included)
    _wait_ready(f"http://127.0.0.1:{port}/health/ready", procs[0])
    return procs, f"http://127.0.0.1:{port}/v1/audio/speech"


def _health(url: str) -> dict[str, Any]:
    import json
    import urllib.error
    import urllib.request

    health = url.replace("/v1/audio/speech", "/health")
    try:
        with urllib.request.urlopen(health, timeout=10) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as exc:  # 503 degraded (a busy host's self-test): same body
        return json.load(exc)


def _rss_mb(pid: int) -> dict[str, float]:
    """Resident memory now and its peak (Linux /proc), in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """The server listens while the voice loads: wait for /health to say ready."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"magpie-tts did not become ready ({url})")


def start_piper_http(voice: Any) -> tuple[list[subprocess.Popen[bytes]], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "piper.http_server", "-m", str(voice.model_path)]
    proc = subprocess.Popen(
        [*cmd, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_listening(port, proc, "piper.http_server")
    return [proc], f"http://127.0.0.1:{port}/synthesize"


def run_http_bench(config: Any, levels: list[int], rounds: int) -> int:
    from magpie_tts.engine import load_voice, split_voice

    voice = load_voice(config.engine.voice)
    split_voice(voice, config.engine.state_dir)
    text = TEXTS["medium"]
    folder = Path(tempfile.mkdtemp(prefix="magpie-bench-http-"))
    procs: list[subprocess.Popen[bytes]] = []
    systems: dict[str, tuple[str, dict[str, Any]]] = {}
    try:
        body = {"input": text, "response_format": "wav"}
        # The daemon as configured and, in the same run, with the other lane setting
        # (worker lanes on or off), to show what the worker lanes buy.
        lanes = resolved_workers(config)
        other = ("magpie-0lane", "0") if lanes else ("magpie-lanes", "2")
        memory: dict[str, dict[str, float]] = {}
        pids: dict[str, int] = {}
        capacity: dict[str, dict[str, Any]] = {}
        for name, workers in (("magpie", str(config.engine.workers)), other):
            (folder / name).mkdir()
            settings = {"engine__workers": workers}
            started, url = start_http_magpie(folder / name, config.engine.state_dir, settings)
            procs += started
            systems[name] = (url, body)
            pids[name] = started[0].pid
            capacity[name] = _health(url)["capacity"]
            memory[name] = {"idle": _rss_mb(started[0].pid)["VmRSS"]}
        admitted = capacity["magpie"]["limit"]
        levels = sorted({*levels, admitted, admitted + 2})
        print(_capacity_lines(capacity, config), file=sys.stderr)
        if importlib.util.find_spec("flask") is None:
            print("piper's HTTP server needs flask (pip install 'piper-tts[http]'): Magpie alone")
        else:
            started, url = start_piper_http(voice)
            procs += started
            systems["piper-http"] = (url, {"text": text})
        for url, body in systems.values():  # warm: first request, first connection
            asyncio.run(load(url, body, 1))
        results: dict[tuple[str, int], list[tuple[list[Fetch], float]]] = {}
        for round_index in range(rounds):  # interleaved, so machine drift hits all alike
            for clients in levels:
                for name, (url, body) in systems.items():
                    print(f"round {round_index + 1}/{rounds}: {name} N={clients}", file=sys.stderr)
                    results.setdefault((name, clients), []).append(
                        asyncio.run(load(url, body, clients))
                    )
        for name, pid in pids.items():
            memory[name]["peak"] = _rss_mb(pid)["VmHWM"]
            capacity[name]["limit_after"] = _health(systems[name][0])["capacity"]["limit"]
    finally:
        stop_all(procs)
    print(_capacity_lines(capacity, config))
    for name, rss in memory.items():
        print(f"{name}: RSS idle {rss['idle']:.0f} MB, peak {rss.get('peak', 0):.0f} MB")
    print(report(results, levels, list(systems), rounds))
    return 0


def _capacity_lines(capacity: dict[str, dict[str, Any]], config: Any) -> str:
    lines = []
    for name, shown in capacity.items():
        lines.append(
            f"{name}: admits {shown['limit']} streams at once "
            f"({shown.get('limit_after', '-')} after the rounds; {shown['source']}: "
            f"{shown.get('real_time_streams')} real-time streams on {shown.get('lanes')} "
            f"lane(s), lane RTF {shown.get('lane_rtf')}; first-audio budget "
            f"{shown.get('first_audio_budget_ms', 0)} ms)"
        )
    lines.append(f"magpie: engine.workers = {config.engine.workers!r} → {resolved_workers(config)}")
    return "\n".join(lines)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def report(
    results: dict[tuple[str, int], list[tuple[list[Fetch], float]]],
    levels: list[int],
    systems: list[str],
    rounds: int,
) -> str:
    lines = [
        f"\nHTTP concurrency, medium sentence ({len(TEXTS['medium'].split())} words), all "
        f"clients at once, real-time readers; {rounds} round(s) per level",
        f"{'N':>3} {'system':<12} {'mean first':>10} {'p95 first':>9} {'refused':>7} "
        f"{'underruns':>9} {'audio s/s':>9} {'mean/piper':>10}",
    ]
    for clients in levels:
        means: dict[str, float] = {}
        for name in systems:
            runs = results.get((name, clients), [])
            every = [f for batch, _ in runs for f in batch]
            fetches = [f for f in every if not f.refused]
            refused = len(every) - len(fetches)
            if not fetches:
                continue
            firsts = [f.first_s * 1000 for f in fetches]
            means[name] = statistics.mean(firsts)
            underruns = sum(f.underrun for f in fetches)
            throughput = statistics.median(
                sum(f.audio_s for f in batch) / wall for batch, wall in runs
            )
            ratio = "-"
            if name != "piper-http" and "piper-http" in systems:
                piper = [
                    f.first_s * 1000
                    for b, _ in results[("piper-http", clients)]
                    for f in b
                    if not f.refused
                ]
                ratio = f"{means[name] / statistics.mean(piper):.3f}"
            lines.append(
                f"{clients:>3} {name:<12} {means[name]:>10.1f} {_p95(firsts):>9.1f} "
                f"{refused:>3}/{len(every):<3} {underruns:>4}/{len(fetches):<4} "
                f"{throughput:>9.2f} {ratio:>10}"
            )
    return "\n".join(lines)
