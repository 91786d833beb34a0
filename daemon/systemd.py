"""sd_notify (READY/STATUS/WATCHDOG/STOPPING) through systemd-python, and journald logging."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


JOURNAL_SOCKET = Path("/run/systemd/journal/socket")


def under_systemd() -> bool:
    return bool(os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"))


def journal_available() -> bool:
    """Started by systemd and journald listening: the journal handler drops silently else."""
    return under_systemd() and JOURNAL_SOCKET.exists()


def setup_logging(level: str) -> None:
    """journald when systemd started us (detected), stderr otherwise — never neither."""
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(level)
    handler: logging.Handler | None = None
    if journal_available():
        try:
            from systemd.journal import JournalHandler

            handler = JournalHandler(SYSLOG_IDENTIFIER="magpie-tts")
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        except ImportError:
            handler = None
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


class Notifier:
    """No-ops when NOTIFY_SOCKET is unset (not started by systemd)."""

    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        watchdog_for_us = not pid or pid == str(os.getpid())
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and watchdog_for_us else None
        self._notify = None
        if self.enabled:
            try:
                from systemd import daemon

                self._notify = daemon.notify
            except ImportError:
                log.warning("systemd-python missing: cannot notify systemd")
                self.enabled = False

    def send(self, state: str) -> None:
        if self._notify is not None:
            self._notify(state)

    def ready(self, status: str) -> None:
        self.send(f"STATUS={status}")
        self.send("READY=1")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    @contextlib.contextmanager
    def starting(self, step_s: float = 20.0) -> Iterator[None]:
        """While a long start step runs (loading the voice, first TensorRT engine builds,
        the self-test), keep extending systemd's start timeout so it is not killed."""
        if self._notify is None:
            yield
            return
        done = threading.Event()

        def extend() -> None:
            while True:
                self.send(f"EXTEND_TIMEOUT_USEC={int(step_s * 3 * 1e6)}")
                if done.wait(step_s):
                    return

        thread = threading.Thread(target=extend, name="magpie-start-timeout", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(1)
