"""`magpie-tts bench`: first audio, total time, RTF and peak RSS, Magpie vs its peers.

Each system runs in its own worker process (so peak RSS is its own), on the same texts
and the same voice, for several interleaved rounds; the table shows medians and the
ratio of each system to piper-tts measured in the same run, and beside them the DNSMOS
of each system's audio of each text (tools/bench_mos.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .bench_mos import Clips, MosColumns, score_clips

TEXTS = {
    "short": "Turn on the kitchen lights.",
    "medium": (
        "The weather in Boston this afternoon will stay mostly sunny with a gentle breeze "
        "from the west and temperatures climbing to around seventy two degrees tonight."
    ),
    "long": (
        "Good morning, here is your briefing for this Tuesday in early spring. Your first "
        "meeting starts at nine with the design team in the large room on the third floor, "
        "and lunch with Sarah is booked for half past twelve at the Italian place downtown. "
        "The weather stays dry until the late afternoon, when "
        "showers are likely, so take an umbrella if you go out after four. Traffic on the "
        "highway is lighter than usual, and your commute should take about twenty minutes. "
        "Finally, remember that the package from your sister is due to arrive before noon."
    ),
}


# text → (samples, sample rate) per chunk, as made; int16 or float samples
Runner = Callable[[str], Iterator[tuple[Any, int]]]


def _timed(chunks: Runner) -> Callable[[str], tuple[float | None, float]]:
    """(seconds to the first chunk, seconds of audio) for one synthesis."""

    def run(text: str) -> tuple[float | None, float]:
        first = None
        audio = 0.0
        started = time.perf_counter()
        for samples, rate in chunks(text):
            if first is None:
                first = time.perf_counter() - started
            audio += len(samples) / rate
        return first, audio

    return run


def _save_clip(chunks: Runner, text: str, path: Path) -> int:
    """One synthesis of `text` as float audio in [-1, 1] in `path` (.npy); its rate."""
    import numpy as np

    parts, rate = [], 0
    for samples, chunk_rate in chunks(text):
        audio = np.asarray(samples)
        if np.issubdtype(audio.dtype, np.integer):  # int16 PCM
            audio = audio / -np.iinfo(audio.dtype).min
        parts.append(audio.astype(np.float32))
        rate = chunk_rate  # one rate per voice
    np.save(path, np.concatenate(parts) if parts else np.zeros(0, np.float32))
    return rate


def _piper_runner(voice_path: str) -> Runner:
    from piper import PiperVoice

    voice = PiperVoice.load(voice_path)
    return lambda text: ((c.audio_float_array, c.sample_rate) for c in voice.synthesize(text))


def _magpie_synth(voice_path: str, provider: str, precision: str, state_dir: str) -> Any:
    """The configured engine (schedule, context, text policy: `engine_config`), on one
    provider and precision; exits when that provider or precision cannot run here."""
    import dataclasses

    from magpie_tts.daemon.config import load_config
    from magpie_tts.daemon.voices import engine_config
    from magpie_tts.engine import StreamingSynthesizer, load_voice, use_shared_thread_pool

    base = engine_config(load_config())
    if base.workers == 0:  # as the daemon runs it (a worker process is one system)
        use_shared_thread_pool(base.runtime.intra_op_threads)
    config = dataclasses.replace(
        base,
        cache_dir=Path(state_dir),
        runtime=dataclasses.replace(base.runtime, provider=provider),
        precision=precision,
        cache=dataclasses.replace(base.cache, memory_bytes=0),  # measure synthesis
    )
    synth = StreamingSynthesizer(load_voice(voice_path), config)
    if synth.choice.used != provider:
        raise SystemExit(f"provider {provider} unavailable: {synth.choice.warning}")
    if precision != "auto" and synth.precision != precision:
        raise SystemExit(f"{precision} decoder unavailable: {synth.precision_reason}")
    return synth


def _magpie_runner(synth: Any) -> Runner:
    return lambda text: ((c.pcm, c.sample_rate) for c in synth.stream(text))


def _stage_profile(synth: Any, text: str, repeats: int) -> dict[str, float]:
    """Median-free sums over repeats, per run: where a synthesis spends its time."""
    from magpie_tts.engine import StageTimes

    synth.stages = StageTimes()
    started = time.perf_counter()
    for _ in range(repeats):
        synth.synthesize(text)
    total = (time.perf_counter() - started) / repeats
    stages, synth.stages = synth.stages, None
    return {
        "total_s": total,
        **{name: getattr(stages, name) / repeats for name in stages.__dataclass_fields__},
    }


def _op_profile(
    path: Path, feeds: dict[str, Any], disabled: tuple[str, ...], runs: int = 10
) -> dict[str, float]:
    """Share of kernel time per operator type (onnxruntime's own profiler), with the
    graph transformers the synthesizer leaves out left out here too."""
    import onnxruntime as ort
    from magpie_tts.engine import RuntimeConfig, session_options

    options = session_options(RuntimeConfig(provider="cpu"))
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.gettempdir()) / "magpie-bench-ops")
    session = ort.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled)
    )
    for _ in range(runs):
        session.run(None, feeds)
    trace = Path(session.end_profiling())
    totals: dict[str, float] = {}
    for event in json.loads(trace.read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event.get("args", {}).get("op_name", "?")
            totals[op] = totals.get(op, 0.0) + event["dur"]
    trace.unlink(missing_ok=True)
    whole = sum(totals.values()) or 1.0
    return {op: t / whole for op, t in sorted(totals.items(), key=lambda kv: -kv[1])}


def _profiles(synth: Any, repeats: int) -> dict[str, Any]:
    import numpy as np
    from magpie_tts.engine import SynthesisOptions

    window = np.zeros((1, synth.decoder.channels, 96), np.float32)
    ids = synth.phonemizer.clause_ids(synth.clauses(TEXTS["medium"])[0])
    disabled = synth.runtime.disabled_optimizers
    return {
        "stages": {name: _stage_profile(synth, text, repeats) for name, text in TEXTS.items()},
        "decoder_ops": _op_profile(
            synth.graph_paths["decoder"], {synth.decoder.latent_name: window}, disabled
        ),
        "frontend_ops": _op_profile(
            synth.graph_paths["frontend"], synth.frontend_feeds(ids, SynthesisOptions()), disabled
        ),
    }


def _decode_reference(synth: Any, state_dir: str, system: str) -> None:
    """Decode the reference latent (made on the CPU, noise off) with this system's
    decoder, so outputs of different providers compare on the very same input."""
    import numpy as np

    folder = Path(state_dir) / "bench"
    latent = np.load(folder / "reference-latent.npy")
    audio = np.concatenate([a.copy() for a in synth.decoder.stream(latent)])
    np.save(folder / f"decoded-{system}.npy", audio)


def _streaming_vits_runner(voice_path: str) -> Runner:
    from streaming_vits import StreamingTTS

    tts = StreamingTTS(voice_path, verbose=False)
    return lambda text: ((c.audio, tts.sample_rate) for c in tts.stream(text))


def _load_system(
    system: str, voice_path: str, state_dir: str, repeats: int
) -> tuple[
    Callable[[str], tuple[float | None, float]], Callable[[], dict[str, Any]] | None, Runner
]:
    """(one timed synthesis of a text, the profile where the system has one, its chunks),
    warmed."""
    profile: Callable[[], dict[str, Any]] | None = None
    if system == "piper":
        chunks = _piper_runner(voice_path)
    elif system.startswith("magpie-"):
        kind = system.split("-", 1)[1]  # fp32 / int8 on the CPU, or a GPU provider
        if kind in ("fp32", "int8"):
            synth = _magpie_synth(voice_path, "cpu", kind, state_dir)
        else:
            synth = _magpie_synth(voice_path, kind, "auto", state_dir)
        if (Path(state_dir) / "bench" / "reference-latent.npy").is_file():
            _decode_reference(synth, state_dir, system)
        chunks = _magpie_runner(synth)
        profile = lambda: _profiles(synth, repeats)  # noqa: E731
    elif system == "streaming-vits":
        chunks = _streaming_vits_runner(voice_path)
    else:
        raise SystemExit(f"unknown system {system}")
    run = _timed(chunks)
    for text in TEXTS.values():  # warm every path once, as a daemon would be
        run(text)
    return run, profile, chunks


REPLY = "@bench "  # marks the worker's answers among whatever else a library prints


def _reply(value: Any) -> None:
    print(REPLY + json.dumps(value), flush=True)


def serve_worker(system: str, voice_path: str, state_dir: str, repeats: int) -> None:
    """One system, loaded once, timing syntheses on request from stdin (`run <text>
    <times>`, then `profile`, `clip <text> <path>`, `quit`): the parent has every system
    run a text in turn, so each system's runs have a peer's seconds away (this host's
    speed drifts by a third within minutes)."""
    loaded = time.perf_counter()
    run, profile, chunks = _load_system(system, voice_path, state_dir, repeats)
    _reply({"load_s": time.perf_counter() - loaded})
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "run":  # run <text> <times>, back to back
            name, _, times = argument.partition(" ")
            firsts, totals, audio = [], [], 0.0
            for _ in range(int(times)):
                started = time.perf_counter()
                first, audio = run(TEXTS[name])
                totals.append(time.perf_counter() - started)
                firsts.append(first or 0.0)
            _reply({"first_s": firsts, "total_s": totals, "audio_s": audio})
        elif command == "profile":  # peak memory before profiling
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            _reply({"peak_rss_mb": rss_mb, "profile": profile() if profile else None})
        elif command == "clip":  # clip <text> <path>: the audio, for the parent's DNSMOS
            name, _, path = argument.partition(" ")
            _reply({"sample_rate": _save_clip(chunks, TEXTS[name], Path(path))})
        elif command == "quit":
            return


class _Worker:
    """The parent's end of a serve_worker process."""

    def __init__(self, system: str, voice_path: str, state_dir: str, repeats: int) -> None:
        self.system = system
        self.load_s = 0.0
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magpie_tts.tools.bench",
                "--worker",
                system,
                "--voice",
                voice_path,
                "--state-dir",
                state_dir,
                "--repeats",
                str(repeats),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )

    def ask(self, command: str | None = None) -> dict[str, Any]:
        """The answer to `command` (None: the ready line); RuntimeError if it died."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            if command is not None:
                self.proc.stdin.write(command + "\n")
                self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(REPLY):
                    return json.loads(line[len(REPLY) :])
        except OSError:  # the pipe broke: it died
            pass
        self.errors.seek(0)
        raise RuntimeError(f"{self.system} failed:\n{self.errors.read()[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.errors.close()


def available_systems(
    state_dir: Path, voice_path: str, peers: list[str], providers: tuple[str, ...] = ("cpu",)
) -> list[str]:
    from magpie_tts.engine import INT8_DECODER, load_voice, split_dir

    systems = ["piper", "magpie-fp32"]
    if (split_dir(state_dir, load_voice(voice_path)) / INT8_DECODER).is_file():
        systems.append("magpie-int8")
    else:
        print("magpie-int8: not prepared (run `magpie-tts prepare`); skipped")
    systems += [f"magpie-{p}" for p in providers if p != "cpu"]  # skipped if unusable
    if "streaming-vits" in peers:
        if importlib.util.find_spec("streaming_vits") is not None:
            systems.append("streaming-vits")
        else:
            print("streaming-vits: not installed (pip install streaming-vits); skipped")
    return systems


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def report(runs: dict[str, list[dict[str, Any]]], mos: MosColumns | None = None) -> str:
    """The speed table with each row's DNSMOS beside it, then each system's mean DNSMOS."""
    mos = mos or MosColumns(problems=["not measured"])
    header = (
        f"{'text':<7} {'system':<15} {'first ms':>9} {'total ms':>9} {'RTF':>7} "
        f"{'first/piper':>11} {'RTF/piper':>9} {'per round':>11} {'RSS MB':>7} "
        f"{'P.808':>5} {'OVRL':>5}"
    )
    lines = [mos.header(TEXTS), header, "-" * len(header)]
    merged: dict[str, dict[str, dict[str, list[float]]]] = {}
    audio: dict[str, float] = {}
    rss: dict[str, float] = {}
    for system, rounds in runs.items():
        rss[system] = max(r["peak_rss_mb"] for r in rounds)
        for r in rounds:
            for text, data in r["texts"].items():
                slot = merged.setdefault(system, {}).setdefault(text, {"first": [], "total": []})
                slot["first"] += data["first_s"]
                slot["total"] += data["total_s"]
                audio[f"{system}/{text}"] = data["audio_s"]
    for text in TEXTS:
        base = merged.get("piper", {}).get(text)
        for system in runs:
            data = merged[system][text]
            first, total = _median_ms(data["first"]), _median_ms(data["total"])
            rtf = total / 1000 / audio[f"{system}/{text}"]
            ratio_first = ratio_rtf = spread = "-"
            if base:
                base_rtf = _median_ms(base["total"]) / 1000 / audio[f"piper/{text}"]
                ratio_first = f"{first / _median_ms(base['first']):.3f}"
                ratio_rtf = f"{rtf / base_rtf:.3f}"
                spread = _round_spread(runs, system, text)
            p808, ovrl = mos.cells(system, text)
            lines.append(
                f"{text:<7} {system:<15} {first:>9.1f} {total:>9.1f} {rtf:>7.4f} "
                f"{ratio_first:>11} {ratio_rtf:>9} {spread:>11} {rss[system]:>7.0f} "
                f"{p808:>5} {ovrl:>5}"
            )
    return "\n".join(lines + mos.summary(list(runs), TEXTS))


def _round_spread(runs: dict[str, list[dict[str, Any]]], system: str, text: str) -> str:
    """Lowest–highest RTF/piper of the rounds taken alone: how far one round's verdict
    can be trusted on this host."""
    ratios = []
    for mine, peer in zip(runs[system], runs["piper"], strict=False):
        own, base = mine["texts"][text], peer["texts"][text]
        own_rtf = statistics.median(own["total_s"]) / own["audio_s"]
        ratios.append(own_rtf / (statistics.median(base["total_s"]) / base["audio_s"]))
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else "-"


SETTLE_S = 0.05  # between two systems' runs: a spinning thread pool goes idle


def _lockstep(
    systems: list[str],
    voice_path: str,
    state_dir: str,
    repeats: int,
    rounds: int,
    clips_dir: Path,
) -> tuple[dict[str, list[dict[str, Any]]], Clips]:
    """Every system loaded at once; in each round each runs each text `repeats` times
    back to back (as one process per system did), the systems in turn and their order
    rotating, so a system's runs and its peers' are seconds apart and the host's drift
    hits all alike. One process per system, one after another, put them minutes apart:
    on this host piper's short text took 60 ms in one bench and 99 ms in the next.
    Run by run alternation instead would time every run cold (caches, idle threads),
    which costs piper's 63 MB of fp32 weights more than Magpie's INT8 decoder. Last,
    each system speaks each text once more into `clips_dir`, for DNSMOS."""
    workers: dict[str, _Worker] = {}
    for system in systems:
        print(f"loading {system}", file=sys.stderr, flush=True)
        worker = _Worker(system, voice_path, state_dir, repeats)
        try:
            loaded = worker.ask()
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            worker.close()
            continue
        worker.load_s = loaded["load_s"]
        workers[system] = worker
    texts: dict[str, list[dict[str, dict[str, Any]]]] = {system: [] for system in workers}

    def ask(system: str, command: str) -> dict[str, Any] | None:
        """The worker's answer; a worker that died is reported and left out of the bench."""
        try:
            return workers[system].ask(command)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            workers.pop(system).close()
            texts.pop(system)
            return None

    try:
        for round_index in range(rounds):
            print(f"round {round_index + 1}/{rounds}", file=sys.stderr, flush=True)
            for system in workers:
                texts[system].append({})
            for text_index, name in enumerate(TEXTS):
                order = list(workers)
                shift = (round_index * len(TEXTS) + text_index) % max(len(order), 1)
                for system in order[shift:] + order[:shift]:
                    if (answer := ask(system, f"run {name} {repeats}")) is not None:
                        texts[system][-1][name] = answer
                    time.sleep(SETTLE_S)
        runs: dict[str, list[dict[str, Any]]] = {}
        for system, worker in list(workers.items()):
            print(f"profiling {system}", file=sys.stderr, flush=True)
            if (facts := ask(system, "profile")) is None:
                continue
            runs[system] = [
                {
                    "system": system,
                    "load_s": worker.load_s,
                    "texts": round_texts,
                    "peak_rss_mb": facts["peak_rss_mb"],
                }
                for round_texts in texts[system]
            ]
            if facts["profile"] is not None:
                runs[system][-1]["profile"] = facts["profile"]
        clips: Clips = {}
        for system in list(workers):
            for name in TEXTS:
                path = clips_dir / f"{system}-{name}.npy"
                if (answer := ask(system, f"clip {name} {path}")) is None:
                    break
                clips.setdefault(system, {})[name] = (path, answer["sample_rate"])
        return runs, clips
    finally:
        for worker in workers.values():
            worker.close()


def run_bench(
    config: Any,
    repeats: int,
    peers: list[str],
    rounds: int = 2,
    voice: str | None = None,
    providers: tuple[str, ...] = ("cpu",),
) -> int:
    from magpie_tts.engine import load_voice, split_voice

    voice_path = str(load_voice(voice or config.engine.voice).model_path)
    state_dir = config.engine.state_dir
    split_voice(load_voice(voice_path), state_dir)
    systems = available_systems(state_dir, voice_path, peers, providers)
    if len(providers) > 1:
        _write_reference_latent(voice_path, state_dir)
    with tempfile.TemporaryDirectory(prefix="magpie-bench-clips-") as clips_dir:
        runs, clips = _lockstep(
            systems, voice_path, str(state_dir), repeats, rounds, Path(clips_dir)
        )
        print("scoring DNSMOS", file=sys.stderr, flush=True)
        mos = score_clips(clips, list(TEXTS))
    runs = {k: v for k, v in runs.items() if v}
    print(
        f"\nmedians over {rounds} rounds x {repeats} runs per text (systems in turn, text by "
        f"text); voice "
        f"{Path(voice_path).name}; words: "
        + ", ".join(f"{k} {len(v.split())}" for k, v in TEXTS.items())
    )
    print(report(runs, mos))
    print(profile_report(runs))
    if len(providers) > 1:
        print(snr_report(state_dir, [s for s in runs if s.startswith("magpie-")]))
    return 0


def profile_report(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Per stage (last round) and the decoder's and frontend's heaviest operators."""
    lines = [
        "",
        "where the time goes (ms per synthesis; context = computed beyond the unit's own)",
        f"{'text':<7} {'system':<12} {'phonemes':>8} {'frontend':>8} {'decoder':>8} "
        f"{'to_pcm':>6} {'other':>6} {'total':>7} {'ids ctx':>7} {'frames ctx':>10}",
    ]
    ops = []
    for system, rounds in runs.items():
        profile = rounds[-1].get("profile")
        if not profile:
            continue
        for text, p in profile["stages"].items():
            staged = p["phonemize_s"] + p["frontend_s"] + p["decoder_s"] + p["pcm_s"]
            ids_ctx = p["ids"] / p["own_ids"] - 1 if p["own_ids"] else 0.0
            frames_ctx = p["decoded_frames"] / p["frames"] - 1 if p["frames"] else 0.0
            lines.append(
                f"{text:<7} {system:<12} {p['phonemize_s'] * 1e3:>8.1f} "
                f"{p['frontend_s'] * 1e3:>8.1f} {p['decoder_s'] * 1e3:>8.1f} "
                f"{p['pcm_s'] * 1e3:>6.1f} {(p['total_s'] - staged) * 1e3:>6.1f} "
                f"{p['total_s'] * 1e3:>7.1f} {ids_ctx:>+7.0%} {frames_ctx:>+10.0%}"
            )
        for graph in ("decoder", "frontend"):
            top = list(profile[f"{graph}_ops"].items())[:6]
            ops.append(
                f"{system} {graph} ops: " + ", ".join(f"{op} {share:.0%}" for op, share in top)
            )
    return "\n".join([*lines, "", *ops])


def _write_reference_latent(voice_path: str, state_dir: Path) -> None:
    """The medium sentence's latent from the CPU frontend with noise off."""
    import numpy as np
    from magpie_tts.engine import SynthesisOptions

    synth = _magpie_synth(voice_path, "cpu", "fp32", str(state_dir))
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    ids = synth.phonemizer.clause_ids(synth.clauses(TEXTS["medium"])[0])
    folder = Path(state_dir) / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "reference-latent.npy", synth.latent(ids, quiet))


def snr_report(state_dir: Path, systems: list[str]) -> str:
    """SNR of each system's decode of the reference latent against the CPU fp32 one."""
    import numpy as np

    folder = Path(state_dir) / "bench"
    reference = np.load(folder / "decoded-magpie-fp32.npy")
    lines = ["", "decoder output vs CPU fp32 on the same latent (noise off)", "system   SNR dB"]
    for system in systems:
        path = folder / f"decoded-{system}.npy"
        if system == "magpie-fp32" or not path.is_file():
            continue
        audio = np.load(path)[: len(reference)]
        noise = float(np.sum((audio - reference[: len(audio)]) ** 2)) or 1e-30
        snr = 10 * np.log10(float(np.sum(reference[: len(audio)] ** 2)) / noise)
        lines.append(f"{system:<15} {snr:>7.1f}")
    return "\n".join(lines)


def _main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--voice", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    serve_worker(args.worker, args.voice, args.state_dir, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
