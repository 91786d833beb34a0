"""Stopping the background INT8 preparation (daemon/int8auto.py) while its worker is being
spawned: the stop ends it at once. (The whole preparation and switch, end to end, are in
test_int8_background.py.)"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from magpie_tts.daemon import int8auto
from magpie_tts.daemon.config import Config


def test_a_stop_while_the_worker_spawns_ends_the_preparation(monkeypatch) -> None:
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def slow_spawn(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        time.sleep(0.3)  # a fork and exec on a busy board: the stop comes meanwhile
        proc = real_popen(
            ["sleep", "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        spawned.append(proc)
        return proc

    monkeypatch.setattr(int8auto.subprocess, "Popen", slow_spawn)
    background = int8auto.Int8Background(Config(), registry=None)  # type: ignore[arg-type]
    thread = threading.Thread(target=background._run, daemon=True)
    background._thread = thread
    thread.start()
    time.sleep(0.1)  # the thread is spawning the worker
    background.stop()
    assert not thread.is_alive()  # not left reading a worker that runs on
    assert spawned and all(proc.poll() is not None for proc in spawned)


def test_a_stop_before_the_spawn_spawns_nothing(monkeypatch) -> None:
    spawned: list[Any] = []
    monkeypatch.setattr(int8auto.subprocess, "Popen", lambda *a, **k: spawned.append(a))
    background = int8auto.Int8Background(Config(), registry=None)  # type: ignore[arg-type]
    background.stop()
    background._run()  # the thread, had it started only now
    assert not spawned and background.state == "off"
