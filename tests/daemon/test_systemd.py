"""systemd: unit checks, sd_notify READY/STATUS/WATCHDOG/STOPPING, unprivileged ExecStart."""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from magpie_tts.daemon.config import Config, load_config

from ..harness import MAGPIE, REPO, Probe, have, make_daemon

UNIT = REPO / "systemd" / "magpie-tts.service"
pytestmark = pytest.mark.skipif(not have("systemd-analyze"), reason="systemd-analyze missing")


def unit_settings(key: str) -> list[str]:
    return [
        line.split("=", 1)[1]
        for line in UNIT.read_text().splitlines()
        if line.startswith(f"{key}=")
    ]


def local_unit(tmp_path: Path, dropin: bool = False) -> Path:
    """The unit with ExecStart pointing at this checkout's magpie-tts (verify needs it)."""
    unit = tmp_path / "magpie-tts.service"
    unit.write_text(UNIT.read_text().replace("/opt/magpie-tts/bin/magpie-tts", MAGPIE))
    if dropin:
        folder = tmp_path / "magpie-tts.service.d"
        folder.mkdir()
        (folder / "jetson-cuda.conf").write_text((REPO / "systemd/jetson-cuda.conf").read_text())
    return unit


@pytest.mark.parametrize("dropin", [False, True])
def test_unit_verifies_cleanly(tmp_path: Path, dropin: bool) -> None:
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(local_unit(tmp_path, dropin))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stderr


def test_unit_exposure_is_at_most_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            "systemd-analyze",
            "security",
            "--offline=yes",
            "--threshold=20",
            str(local_unit(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout[-500:]
    assert "Overall exposure level" in result.stdout


def test_unit_has_the_required_settings() -> None:
    text = UNIT.read_text()
    for setting in (
        "Type=notify",
        "NotifyAccess=main",
        "Restart=on-failure",
        "StateDirectory=magpie-tts",
        "DynamicUser=yes",
        "SupplementaryGroups=audio",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "DevicePolicy=closed",
        "SystemCallFilter=@system-service",
    ):
        assert setting in text.splitlines(), setting
    assert int(unit_settings("WatchdogSec")[0]) > 0


def test_example_config_documents_the_defaults() -> None:
    example = load_config(REPO / "systemd" / "config.toml", environ={})
    defaults = Config()
    assert example.model_dump(exclude={"engine": {"state_dir"}}) == defaults.model_dump(
        exclude={"engine": {"state_dir"}}
    )
    text = (REPO / "systemd" / "config.toml").read_text()
    for section, fields in defaults.model_dump().items():
        if isinstance(fields, dict):
            assert f"[{section}]" in text, section
            for key in fields:
                assert re.search(rf"^#? ?{key} ?=", text, re.M), f"{section}.{key} undocumented"


def test_install_service_into_an_image_root(tmp_path: Path) -> None:
    subprocess.run(
        [str(REPO / "tools/install-service.sh"), "--root", str(tmp_path), "--jetson"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert (tmp_path / "etc/systemd/system/magpie-tts.service").read_text() == UNIT.read_text()
    assert (tmp_path / "etc/magpie-tts/config.toml").is_file()
    assert (tmp_path / "etc/systemd/system/magpie-tts.service.d/jetson-cuda.conf").is_file()
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants/magpie-tts.service"
    assert wants.is_symlink()


class NotifySocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o777)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []

    def read_until(self, predicate, timeout: float) -> list[tuple[float, str]]:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            for line in data.splitlines():
                self.messages.append((time.monotonic(), line))
            if predicate(self.messages):
                return self.messages
        raise TimeoutError(f"notify messages so far: {self.messages}")

    def drain(self) -> list[str]:
        """Everything queued on the socket right now."""
        got = []
        while True:
            try:
                got += self.sock.recv(4096).decode().splitlines()
            except TimeoutError:
                break
        self.messages += [(time.monotonic(), m) for m in got]
        return got

    def close(self) -> None:
        self.sock.close()


def has(messages: list[tuple[float, str]], text: str) -> bool:
    return any(m == text or m.startswith(text) for _, m in messages)


def test_notify_ready_watchdog_stall_and_stop(tmp_path, broker, prepared_state) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state)
    daemon.env.update(
        {
            "NOTIFY_SOCKET": str(notify.path),
            "WATCHDOG_USEC": "2000000",
            "MAGPIE_TTS_TEST_HOOKS": "1",
        }
    )
    daemon.start(wait_online=False)
    try:
        messages = notify.read_until(lambda m: has(m, "READY=1"), timeout=90)
        lines = [m for _, m in messages]
        ready_at = lines.index("READY=1")
        # the start timeout is extended while the voice loads (TensorRT builds are slow)
        assert any(m.startswith("EXTEND_TIMEOUT_USEC=") for m in lines[:ready_at]), lines
        statuses = [m for m in lines[:ready_at] if m.startswith("STATUS=")]
        assert any("first-audio=" in s and "rtf=" in s for s in statuses), statuses
        # pings at WatchdogSec/2 = 1 s
        messages = notify.read_until(lambda m: sum(x == "WATCHDOG=1" for _, x in m) >= 4, 15)
        pings = [t for t, m in messages if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in itertools.pairwise(pings)]
        assert all(0.5 < g < 1.8 for g in gaps), gaps
        # stall the synthesis thread: pings must stop
        daemon.proc.send_signal(signal.SIGUSR1)
        time.sleep(5.0)  # the hang starts within 1 s; the health loop notices after 2 s
        notify.drain()
        time.sleep(3.0)
        late = [m for m in notify.drain() if m == "WATCHDOG=1"]
        assert late == [], "watchdog kept pinging although the synthesis thread hangs"
        daemon.proc.send_signal(signal.SIGTERM)
        notify.read_until(lambda m: has(m, "STOPPING=1"), timeout=15)
        assert daemon.proc.wait(15) == 0
    finally:
        daemon.stop()
        notify.close()


def test_selftest_over_budget_can_fail_the_start(tmp_path, broker, prepared_state) -> None:
    daemon = make_daemon(
        tmp_path / "d",
        broker.port,
        prepared_state,
        selftest__budget_first_audio_ms="0.01",
        selftest__on_fail="exit",
    )
    daemon.start(wait_online=False)
    assert daemon.proc.wait(90) == 3
    assert "OVER BUDGET" in daemon.log()


def test_selftest_over_budget_reports_degraded_by_default(tmp_path, broker, prepared_state):
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state, selftest__budget_rtf="0.0001")
    probe = Probe(broker.port, [f"{daemon.base}/status"])
    try:
        daemon.start()
        status = probe.wait(f"{daemon.base}/status", lambda s: s.get("state") == "online")[-1]
        assert status["health"] == "degraded" and "RTF" in status["degraded"]
        assert status["selftest"]["passed"] is False
    finally:
        probe.close()
        daemon.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_execstart_runs_as_an_unprivileged_user(tmp_path, broker, prepared_state) -> None:
    """ExecStart and Environment= from the unit, as `nobody`, as systemd would run it."""
    nobody = pwd.getpwnam("nobody")
    argv = shlex.split(unit_settings("ExecStart")[0])
    argv[0] = MAGPIE
    tmp_path = Path(tempfile.mkdtemp(prefix="magpie-nobody-"))  # pytest's tmp is root-only
    tmp_path.chmod(0o755)
    state = tmp_path / "state"
    subprocess.run(["cp", "-r", str(prepared_state), str(state)], check=True)
    daemon = make_daemon(tmp_path / "d", broker.port, state)
    for path in (state, daemon.folder):
        subprocess.run(["chown", "-R", f"{nobody.pw_uid}:{nobody.pw_gid}", str(path)], check=True)
    env = {k: v for k, v in daemon.env.items() if k != "MAGPIE_TTS_ENGINE__STATE_DIR"}
    for assignment in " ".join(unit_settings("Environment")).split():
        key, value = assignment.split("=", 1)
        env[key] = value
    env.update(
        {
            "STATE_DIRECTORY": str(state),
            "HOME": "/nonexistent",
            "MAGPIE_TTS_CONFIG": str(daemon.folder / "absent-is-fine.toml"),
        }
    )
    notify = NotifySocket(tmp_path / "notify.sock")
    env["NOTIFY_SOCKET"] = str(notify.path)
    log = (daemon.folder / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
            *argv,
        ],
        env=env,
        stdout=log,
        stderr=log,
        cwd="/",
    )
    probe = Probe(broker.port, [f"{daemon.base}/#"])
    try:
        notify.read_until(lambda m: has(m, "READY=1"), timeout=90)
        daemon.say("Running as nobody.")
        done = probe.wait(f"{daemon.base}/events", lambda e: e["event"] == "finished")
        assert done[0]["duration_s"] > 0.5
        assert daemon.tap.stat().st_uid == nobody.pw_uid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        probe.close()
        notify.close()
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(tmp_path, ignore_errors=True)
