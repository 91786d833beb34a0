"""`magpie-tts run`: load, warm, self-test, connect, notify systemd, serve until SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import threading

from magpie_tts.engine import EngineError

from .config import Config
from .mqtt import ConnectError
from .selftest import run_selftest
from .service import Service
from .systemd import Notifier

log = logging.getLogger(__name__)

EXIT_SELFTEST_FAILED = 3
EXIT_START_FAILED = 1


def status_line(service: Service) -> str:
    status = service.status()
    test = service.selftest or {}
    ttfa = status.get("ttfa_ms", {})
    parts = [
        f"{status['health']}",
        f"provider={status['provider']}/{status['precision']}",
        f"first-audio={test.get('first_audio_ms', '?')}ms",
        f"rtf={test.get('rtf', '?')}",
        f"queue={status['queue_depth']}",
    ]
    if ttfa:
        parts.append(f"ttfa-p50={ttfa['p50']}ms")
    if status["audio"] != "ok":
        parts.append("audio=ERROR")
    return " ".join(parts)


def run(config: Config) -> int:
    notifier = Notifier()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    notifier.status("loading voice")
    try:
        service = Service(config)
    except EngineError as exc:
        log.error("cannot start: %s", exc)
        return EXIT_START_FAILED
    if config.selftest.enabled:
        notifier.status("running latency self-test")
        service.selftest = run_selftest(service.registry.default, config.selftest)
        if not service.selftest["passed"]:
            if config.selftest.on_fail == "exit":
                log.error("self-test over budget and selftest.on_fail = exit")
                return EXIT_SELFTEST_FAILED
            service.degraded = "; ".join(service.selftest.get("problems", []))
        notifier.status(
            f"self-test first-audio={service.selftest['first_audio_ms']}ms "
            f"rtf={service.selftest['rtf']}"
        )
    try:
        service.start()
    except ConnectError as exc:
        log.error("cannot start: %s", exc)
        service.player.close()
        return EXIT_START_FAILED
    if config.selftest.audible and config.selftest.enabled:
        service.say("Magpie is ready.")
    notifier.ready(status_line(service))
    log.info("serving on %s (pid %d)", config.mqtt.base_topic, os.getpid())
    interval = notifier.watchdog_s / 2 if notifier.watchdog_s else 5.0
    service.stale_s = max(2.0, notifier.watchdog_s or 10.0)
    if os.environ.get("MAGPIE_TTS_TEST_HOOKS") == "1":
        # Test hook: SIGUSR1 makes the synthesis thread hang, as a deadlock would.
        hang = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: setattr(service, "stall_hook", hang.wait))
        service.fail_marker = "__magpie_fail__"
    while not stop.wait(min(interval, 5.0)):
        if service.healthy:
            notifier.watchdog()
            notifier.status(status_line(service))
        else:
            log.error("synthesis or player thread is stuck; withholding watchdog ping")
    notifier.stopping()
    log.info("stopping")
    service.shutdown(drain_s=0.0)
    return 0
