"""`magpie-tts run`: load, warm, self-test, connect, notify systemd, serve until stopped."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

from magpie_tts.engine import EngineError

from .config import Config, ConfigError, load_config
from .frontends.mqtt.link import ConnectError
from .selftest import run_selftest
from .service import Service
from .systemd import Notifier

log = logging.getLogger(__name__)

EXIT_SELFTEST_FAILED = 3
EXIT_START_FAILED = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def status_line(service: Service) -> str:
    status = service.status()
    test = service.selftest or {}
    ttfa = status.get("ttfa_ms", {})
    parts = [
        f"{status['health']}",
        f"provider={status['provider']}/{status['precision']}",
        *(
            [f"int8-preparing={status['int8']['progress_percent']}%"]
            if status.get("int8", {}).get("state") == "preparing"
            else []
        ),
        f"first-audio={test.get('first_audio_ms', '?')}ms",
        f"rtf={test.get('rtf', '?')}",
        f"queue={status['queue_depth']}",
    ]
    if ttfa:
        parts.append(f"ttfa-p50={ttfa['p50']}ms")
    if status["audio"] != "ok":
        parts.append("audio=ERROR")
    return " ".join(parts)


def _reload(config_path: Path | None) -> None:
    """SIGHUP: re-read the configuration; the log level applies at once, the rest at the
    next start (a voice or broker change needs a restart, as with most daemons)."""
    try:
        fresh = load_config(config_path)
    except ConfigError as exc:
        log.error("SIGHUP: configuration not reloaded: %s", exc)
        return
    logging.getLogger().setLevel(fresh.log_level)
    log.warning(
        "SIGHUP: log level is now %s; other settings apply at the next start", fresh.log_level
    )


def run(config: Config, config_path: Path | None = None) -> int:
    notifier = Notifier()
    stop = threading.Event()
    reload = threading.Event()
    for number in STOP_SIGNALS:
        signal.signal(number, lambda signum, _frame: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: reload.set())
    try:
        service = Service(config)
        service.open()  # frontends that answer while the voice loads (/health: "loading")
    except (OSError, ConfigError) as exc:  # open() closed what it had started
        log.error("cannot start: %s", exc)
        return EXIT_START_FAILED
    try:
        return _serve(service, config_path, notifier, stop, reload)
    finally:
        service.shutdown()  # whatever was started (a second call does nothing)


def _serve(
    service: Service,
    config_path: Path | None,
    notifier: Notifier,
    stop: threading.Event,
    reload: threading.Event,
) -> int:
    config = service.config
    notifier.status("loading voice")
    try:
        with notifier.starting():  # TensorRT engine builds can take minutes the first time
            service.load()
    except EngineError as exc:
        log.error("cannot start: %s", exc)
        return EXIT_START_FAILED
    synth = service.registry.default
    if config.selftest.enabled:
        notifier.status("running latency self-test")
        service.selftest = run_selftest(synth, config.selftest)
        if not service.selftest["passed"]:
            if config.selftest.on_fail == "exit":
                log.error("self-test over budget and selftest.on_fail = exit")
                return EXIT_SELFTEST_FAILED
            service.degraded = "; ".join(service.selftest.get("problems", []))
        notifier.status(
            f"self-test first-audio={service.selftest['first_audio_ms']}ms "
            f"rtf={service.selftest['rtf']}"
        )
    pinned = synth.pin_hot_phrases()  # after the self-test, which must not hit them
    if pinned:
        log.info("phrase cache: %d hot phrase unit(s) ready in memory", pinned)
    try:
        service.start()
    except (ConnectError, OSError) as exc:  # the service closed what it had started
        log.error("cannot start: %s", exc)
        return EXIT_START_FAILED
    service.int8.start()  # where no INT8 verdict exists: prepared in the background
    if config.selftest.audible and config.selftest.enabled:
        service.core.say_local("Magpie is ready.")
    notifier.ready(status_line(service))
    names = ", ".join(frontend.name for frontend in service.frontends)
    log.info("serving %s (pid %d)", names, os.getpid())
    interval = notifier.watchdog_s / 2 if notifier.watchdog_s else 5.0
    service.stale_s = max(2.0, notifier.watchdog_s or 10.0)
    if os.environ.get("MAGPIE_TTS_TEST_HOOKS") == "1":
        # Test hook: SIGUSR1 makes the synthesis thread hang, as a deadlock would.
        hang = threading.Event()
        speaker = service.core.speaker
        signal.signal(signal.SIGUSR1, lambda *_: setattr(speaker, "stall_hook", hang.wait))
        service.core.fail_marker = "__magpie_fail__"
    while not stop.wait(min(interval, 5.0)):
        if reload.is_set():
            reload.clear()
            _reload(config_path)
            try:
                service.reload_lexicon()
            except EngineError as exc:
                log.error("SIGHUP: lexicon not reloaded, the old one stays: %s", exc)
        service.registry.retry_primary()  # a voice that did not load: again, in time
        if service.healthy:
            notifier.watchdog()
            notifier.status(status_line(service))
        else:
            log.error("synthesis or player thread is stuck; withholding watchdog ping")
    notifier.stopping()
    log.info("stopping")
    service.shutdown()
    log.info("stopped")
    return 0
