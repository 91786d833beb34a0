"""INT8 made by the daemon itself: where no verdict exists for this model, onnxruntime
and CPU, the running daemon prepares INT8 in the background while it serves fp32, and
switches to it between utterances when it passes its gate.

The preparation runs in a process of its own (`magpie_tts.tools.prepare_worker`) at the
lowest priority the kernel has (SCHED_IDLE, nice 19), pinned to one core: it takes only
what serving leaves. Its files are written in temp folders and renamed into place, the
report last (engine/precision.py): a daemon stopped mid-way, a full disk or a crash
leaves no verdict and fp32 serving (with a warning); the next start prepares again. A
verdict, pass or fail, is kept and not redone at every start.

The switch: a new synthesizer on the INT8 graphs is loaded and warmed beside the fp32
one, then becomes the registry's default (voices.py). An utterance takes its synthesizer
when it starts, so one in flight finishes on the graphs it started with; nothing is
dropped and nothing restarts.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from magpie_tts.engine import StreamingSynthesizer, split_voice
from magpie_tts.engine.precision import needs_preparation, read_report

from .config import Config
from .voices import VoiceRegistry

log = logging.getLogger(__name__)

WORKER = "magpie_tts.tools.prepare_worker"
LOG_STEP = 0.1  # progress goes to the log every 10 %, not every step
PR_SET_PDEATHSIG = 1  # prctl: a signal when the thread that started it ends


def _idle() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The preparation's priority: SCHED_IDLE where the kernel has it, nice 19 anyway,
    and one core (the last): serving keeps the others, and this one when it needs it."""
    os.nice(19)
    with contextlib.suppress(OSError, AttributeError):  # Linux: ends with the daemon
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})


class Int8Background:
    """The background preparation and the switch. `state`: "off" (engine.int8 = "fp32",
    or not on the CPU), "int8" (running INT8), "preparing", "fp32" (a verdict says so, or
    the preparation failed: `reason` says which)."""

    def __init__(
        self,
        config: Config,
        registry: VoiceRegistry,
        on_change: Callable[[], None] = lambda: None,
        on_switch: Callable[[StreamingSynthesizer], None] = lambda synth: None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.on_change = on_change
        self.on_switch = on_switch  # the new graphs' speed: admission is sized again
        self.state = "off"
        self.progress = 0.0  # 0-1 while preparing
        self.reason = ""
        self.started_at: float | None = None
        self.took_s: float | None = None  # preparation start to INT8 speaking
        self._proc: subprocess.Popen[bytes] | None = None
        # Held while the worker is spawned: a stop either finds it to end, or is seen by
        # the thread before it spawns one (a daemon stopped right after its start waited
        # the thread's whole join timeout otherwise, the worker running meanwhile).
        self._spawning = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Decide at start: nothing to do, a verdict to follow, or a preparation to run."""
        synth = self.registry.default
        requested = self.config.engine.int8
        if synth.precision == "int8":
            self.state, self.reason = "int8", synth.precision_reason
            return
        if self.registry.load_problem:  # speaking with the fallback: nothing to prepare
            self.state, self.reason = "off", self.registry.load_problem
            return
        if requested == "fp32" or synth.choice.used != "cpu":
            self.state, self.reason = "off", synth.precision_reason
            return
        split = split_voice(synth.voice, self.config.engine.state_dir)
        if not needs_preparation(split, requested, synth.choice.used):
            self.state, self.reason = "fp32", synth.precision_reason
            return
        self.state, self.started_at = "preparing", time.monotonic()
        self.reason = "no INT8 verdict for this model, onnxruntime and CPU: preparing"
        log.info("INT8: %s, in the background at idle priority; fp32 serves meanwhile", self.reason)
        self._thread = threading.Thread(target=self._run, name="magpie-int8", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop a preparation (its partial files are never adopted)."""
        with self._spawning:
            self._stopping.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state, "reason": self.reason}
        if self.state == "preparing":
            status["progress_percent"] = round(100 * self.progress)
        if self.took_s is not None:
            status["prepared_in_s"] = round(self.took_s, 1)
        return status

    # -- the preparation thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            code, last = self._prepare()
            if self._stopping.is_set():
                return
            if code != 0:
                self._failed(f"the preparation failed (exit {code}): {last or 'no message'}")
                return
            self._follow_verdict()
        except Exception as exc:  # any failure leaves fp32 serving
            self._failed(f"{type(exc).__name__}: {exc}")
        finally:
            self._proc = None

    def _prepare(self) -> tuple[int, str]:
        with self._spawning:
            if self._stopping.is_set():
                return 0, ""  # stopped before it began (_run sees the stop)
            self._proc = proc = subprocess.Popen(
                [sys.executable, "-m", WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_idle,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
        assert proc.stdin is not None and proc.stdout is not None
        with proc.stdin:
            proc.stdin.write(self.config.model_dump_json().encode())
        last = self._read(proc.stdout)
        return proc.wait(), last

    def _read(self, stdout: IO[bytes]) -> str:
        """Follow the worker's lines: JSON progress, or its messages (the last kept)."""
        logged, last = 0.0, ""
        for raw in stdout:
            line = raw.decode(errors="replace").strip()
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and "progress" in message:
                self.progress = float(message["progress"])
                if self.progress >= logged + LOG_STEP or self.progress >= 1.0:
                    logged = self.progress
                    log.info("INT8 preparation: %d %%", round(100 * self.progress))
            elif line:
                last = line[-300:]
                log.debug("INT8 preparation: %s", line)
        return last

    def _follow_verdict(self) -> None:
        synth = self.registry.default
        split = split_voice(synth.voice, self.config.engine.state_dir)
        report = read_report(split)
        if report is None:
            self._failed("the preparation wrote no verdict")
            return
        log.info("INT8 gate: %s", report.get("reason"))
        if not report.get("passed") and self.config.engine.int8 != "int8":
            self.state, self.reason = "fp32", f"INT8 gate failed: {report.get('reason')}"
            log.info("INT8: staying fp32 (the verdict is kept: not prepared again)")
            self.on_change()
            return
        switched = self.registry.switch_default()
        self.on_switch(switched)
        self.state, self.reason = switched.precision, switched.precision_reason
        if self.started_at is not None:
            self.took_s = time.monotonic() - self.started_at
        log.info(
            "INT8: now speaking with %s (%s), %.0f s after the preparation began",
            switched.precision,
            switched.precision_reason,
            self.took_s or 0,
        )
        self.on_change()

    def _failed(self, why: str) -> None:
        self.state, self.reason = "fp32", f"INT8 preparation did not finish: {why}"
        log.warning("%s; fp32 keeps serving (the next start tries again)", self.reason)
        self.on_change()
