"""Private processes for the tests, the tools and the benches: a mosquitto on a free loopback
port, and the daemon as `magpie-tts run` (the console script beside this Python)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

MAGPIE = str(Path(sys.executable).with_name("magpie-tts"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_port(
    port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until something listens on the loopback `port`; fail at once if `proc` exits."""
    deadline = time.monotonic() + timeout
    while not listening(port):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args!r} exited ({proc.returncode}) before listening on {port}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listening on {port}")
        time.sleep(0.05)


def stop_all(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 10.0) -> None:
    """SIGTERM to all of them at once, then wait for each; kill what outlives `timeout`."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Broker:
    """mosquitto on a free loopback port (or `port`: restartable on the same one), its
    configuration and its log (mosquitto.log) in `folder`. Anonymous unless `extra_conf`
    (which replaces `allow_anonymous true`) says otherwise."""

    def __init__(
        self, folder: Path, extra_conf: str = "", port: int | None = None, persistent: bool = False
    ) -> None:
        self.folder = folder
        self.port = port or free_port()
        self.conf = folder / "mosquitto.conf"
        persistence = "persistence false\n"
        if persistent:  # sessions and queued QoS 1 messages survive a restart
            persistence = f"persistence true\npersistence_location {folder}/\nautosave_interval 1\n"
        self.conf.write_text(
            # user root: as root, mosquitto would drop to `mosquitto`, who cannot read
            # pytest's private temp folders (password, ACL and key files live there).
            "user root\nper_listener_settings false\nlog_dest stderr\n"
            + persistence
            + f"listener {self.port} 127.0.0.1\n"
            + (extra_conf or "allow_anonymous true\n")
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Broker:
        with (self.folder / "mosquitto.log").open("ab") as log:
            self.proc = subprocess.Popen(
                ["mosquitto", "-c", str(self.conf)], stdout=log, stderr=log
            )
        try:
            wait_port(self.port, proc=self.proc)
        except (TimeoutError, RuntimeError):
            self.stop()  # not left running behind a failed start
            raise
        return self

    def stop(self, graceful: bool = False) -> None:
        if self.proc is not None:
            if graceful:
                self.proc.terminate()
            else:
                self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def daemon_env(
    folder: Path, mqtt_port: int, state_dir: Path | None = None, **settings: str
) -> dict[str, str]:
    """This process's environment without its MAGPIE_TTS_* variables, an empty config file
    in `folder`, the broker's port, the state dir, then each `section__key=value` of
    `settings` as MAGPIE_TTS_SECTION__KEY."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "absent-is-fine.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAGPIE_TTS_")}
    env["MAGPIE_TTS_CONFIG"] = str(config)
    env["MAGPIE_TTS_MQTT__PORT"] = str(mqtt_port)
    if state_dir is not None:
        env["MAGPIE_TTS_ENGINE__STATE_DIR"] = str(state_dir)
    env.update({f"MAGPIE_TTS_{k.upper()}": v for k, v in settings.items()})
    return env


class DaemonProcess:
    """`magpie-tts run` with `env`, its output appended to `log_path` (None: this process's
    own stdout and stderr), in `cwd` (None: this process's)."""

    def __init__(
        self, env: dict[str, str], log_path: Path | None = None, cwd: Path | None = None
    ) -> None:
        self.env = env
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        if self.log_path is None:
            self.proc = subprocess.Popen([MAGPIE, "run"], env=self.env, cwd=self.cwd)
        else:
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [MAGPIE, "run"], env=self.env, stdout=log, stderr=log, cwd=self.cwd
                )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then kill; the exit code (None: never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            stop_all([self.proc], timeout)
        code = self.proc.returncode
        self.proc = None
        return code
