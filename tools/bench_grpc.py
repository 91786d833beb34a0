"""`magpie-tts bench --grpc`: NVIDIA's Riva client against Magpie's gRPC frontend, with
piper-tts (same voice) in the same run as the peer: its whole-sentence time in a worker
process of its own (as `magpie-tts bench` runs it), and, where flask is installed
(`piper-tts[http]`), its own HTTP server for N calls at once.

- One call at a time: `synthesize_online` with the medium sentence in seven text pieces
  (sent as fast as the client takes them, as an LLM's tokens) → first audio (call begun →
  first audio response) and the whole answer; `synthesize` (whole audio); against
  piper's whole-sentence time (POST /synthesize → the whole WAV read). Rounds
  interleaved, so machine drift hits all alike.
- N calls at once (10): N `synthesize_online` streams, each on its own channel, begun
  together: mean and p95 first audio, against piper's one whole sentence, and against N
  POSTs to piper's HTTP server at once where it can run (its whole answer: first audio
  for a client that plays a file).
Readers take audio as fast as it comes (no real-time pacing).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .bench import TEXTS, _Worker
from .bench_daemon import start_magpie
from .bench_http import _p95, start_piper_http
from .processes import stop_all

PIECES = 7


def pieces(text: str, count: int = PIECES) -> list[str]:
    """The text cut into `count` pieces at word boundaries, spaces kept (LLM tokens)."""
    words = text.split(" ")
    size = -(-len(words) // count)
    cuts = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return [cut + (" " if i < len(cuts) - 1 else "") for i, cut in enumerate(cuts)]


def riva_online(uri: str, text: str) -> tuple[float, float] | None:
    """(first audio, whole answer) in seconds for one `synthesize_online` call; None
    when the daemon refused it as busy (its admission: the measured capacity)."""
    import grpc
    import riva.client

    service = riva.client.SpeechSynthesisService(riva.client.Auth(uri=uri))
    sent = time.perf_counter()
    first = None
    try:
        # a list: the 2.28.0 client's synthesize_online fails on a plain generator
        for response in service.synthesize_online(pieces(text), sample_rate_hz=22050):
            if response.audio and first is None:
                first = time.perf_counter() - sent
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return None
        raise
    assert first is not None, "no audio"
    return first, time.perf_counter() - sent


def riva_whole(uri: str, text: str) -> float:
    import riva.client

    service = riva.client.SpeechSynthesisService(riva.client.Auth(uri=uri))
    sent = time.perf_counter()
    assert service.synthesize(text, sample_rate_hz=22050).audio
    return time.perf_counter() - sent


def piper_whole(url: str, text: str) -> float:
    request = urllib.request.Request(
        url, data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}
    )
    sent = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as reply:
        assert reply.read()
    return time.perf_counter() - sent


def together(call: Callable[[], Any], clients: int) -> list[Any]:
    """`clients` calls begun at the same moment, each on its own thread."""
    barrier = threading.Barrier(clients)

    def one() -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(lambda _: one(), range(clients)))


def run_grpc_bench(config: Any, rounds: int, clients: int = 10) -> int:
    from magpie_tts.engine import load_voice, split_voice

    voice = load_voice(config.engine.voice)
    split_voice(voice, config.engine.state_dir)
    text = TEXTS["medium"]
    folder = Path(tempfile.mkdtemp(prefix="magpie-bench-grpc-"))
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, list[float]] = {}
    try:
        # admission as configured (limits.max_streams, the first-audio budget): calls
        # refused as busy are counted, not timed
        settings = {"grpc__rate_per_minute": "100000", "limits__max_waiting_streams": "64"}
        started, port = start_magpie(folder, config.engine.state_dir, "grpc", settings)
        procs += started
        uri = f"127.0.0.1:{port}"
        piper = _Worker("piper", str(voice.model_path), str(config.engine.state_dir), 1)
        piper.ask()  # loaded
        url = None
        if importlib.util.find_spec("flask") is not None:
            started, url = start_piper_http(voice)
            procs += started
            piper_whole(url, text)  # warm: first call, first connection
        else:
            print("piper's HTTP server needs flask: N=10 against one piper sentence only")
        riva_online(uri, text)
        for index in range(rounds):
            print(f"grpc: round {index + 1}/{rounds}", file=sys.stderr)
            one = riva_online(uri, text)
            assert one is not None, "a lone call refused as busy"
            results.setdefault("online first", []).append(one[0])
            results.setdefault("online whole", []).append(one[1])
            results.setdefault("synthesize", []).append(riva_whole(uri, text))
            results.setdefault("piper", []).append(piper.ask("run medium 1")["total_s"][0])
            batch = [b for b in together(lambda: riva_online(uri, text), clients) if b]
            results.setdefault("N refused", []).append(clients - len(batch))
            results.setdefault("N online first", []).extend(f for f, _ in batch)
            results.setdefault("N online whole", []).extend(w for _, w in batch)
            if url is not None:
                results.setdefault("N piper", []).extend(
                    together(lambda: piper_whole(url, text), clients)
                )
        piper.close()
    finally:
        stop_all(procs)
    print(json.dumps(results), file=sys.stderr)  # the raw seconds, whatever the table
    print(report(results, rounds, clients))
    return 0


def report(results: dict[str, list[float]], rounds: int, clients: int) -> str:
    """The table: medians of one call, mean and p95 of N at once, each against piper's
    whole sentence (one call), and N at once against N POSTs to piper's server when run."""
    piper = statistics.median(results["piper"])
    lines = [
        f"\ngRPC (Riva client) vs piper-tts, medium sentence "
        f"({len(TEXTS['medium'].split())} words) in {PIECES} pieces; {rounds} round(s)",
        f"{'one call':<26} {'median ms':>9} {'/piper':>7}",
    ]
    for name in ("online first", "online whole", "synthesize", "piper"):
        value = statistics.median(results[name])
        lines.append(f"{name:<26} {value * 1000:>9.1f} {value / piper:>7.3f}")
    npiper = statistics.mean(results["N piper"]) if "N piper" in results else None
    lines.append(
        f"{f'N={clients} at once':<26} {'mean ms':>9} {'p95 ms':>7} {'/piper':>7} {'/N piper':>8}"
    )
    for name in ("N online first", "N online whole", "N piper"):
        if not results.get(name):
            continue
        values = [v * 1000 for v in results[name]]
        mean = statistics.mean(values)
        against = f"{mean / (npiper * 1000):>8.3f}" if npiper else f"{'-':>8}"
        lines.append(
            f"{name:<26} {mean:>9.1f} {_p95(values):>7.1f} {mean / (piper * 1000):>7.3f} {against}"
        )
    refused = sum(results.get("N refused", ()))
    lines.append(f"N={clients} calls refused as busy: {refused:g} of {clients * rounds}")
    return "\n".join(lines)
