"""MQTT security: password file + ACL, TLS with a CA, clear errors, no secrets in logs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ...harness import Broker, Probe, have, make_daemon, publish

PASSWORD = "s3cret-Magpie-pw"
pytestmark = [
    pytest.mark.slow,  # starts its own brokers (passwords, TLS) and daemons
    pytest.mark.skipif(not have("mosquitto_passwd"), reason="mosquitto missing"),
]


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("auth")
    passwd = folder / "passwd"
    for index, (user, password) in enumerate(
        [("magpie", PASSWORD), ("kitchen", "kitchen-pw"), ("guest", "guest-pw")]
    ):
        flags = ["-c"] if index == 0 else []
        subprocess.run(["mosquitto_passwd", *flags, "-b", str(passwd), user, password], check=True)
    acl = folder / "acl"
    acl.write_text(
        "user magpie\ntopic readwrite #\n\n"
        "user kitchen\ntopic write +/say\ntopic read +/events\ntopic read +/status\n\n"
        "user guest\ntopic read +/status\n"
    )
    subprocess.run(["chmod", "0644", str(passwd), str(acl)], check=True)
    broker = Broker(folder, f"allow_anonymous false\npassword_file {passwd}\nacl_file {acl}\n")
    broker.start()
    yield broker
    broker.stop()


def secure_daemon(tmp_path, broker, state, password: str):
    secret = tmp_path / "mqtt-password"
    secret.write_text(password + "\n")
    return make_daemon(
        tmp_path / "d", broker.port, state, mqtt__username="magpie", mqtt__password_file=str(secret)
    )


def test_password_file_and_acl(tmp_path, auth_broker, prepared_state) -> None:
    daemon = secure_daemon(tmp_path, auth_broker, prepared_state, PASSWORD)
    daemon.start(wait_online=False)
    probe = Probe(auth_broker.port, ["#"], username="magpie", password=PASSWORD)
    try:
        probe.wait(f"{daemon.base}/status", lambda s: s.get("state") == "online", timeout=60)
        # a user the ACL does not allow to write is silently dropped by the broker
        publish(
            auth_broker.port,
            f"{daemon.base}/say",
            "Guest speaking.",
            "-u",
            "guest",
            "-P",
            "guest-pw",
        )
        publish(
            auth_broker.port,
            f"{daemon.base}/say",
            json.dumps({"text": "Kitchen speaking.", "id": "kitchen-1"}),
            "-u",
            "kitchen",
            "-P",
            "kitchen-pw",
        )
        probe.wait(
            f"{daemon.base}/events", lambda e: e["id"] == "kitchen-1" and e["event"] == "finished"
        )
        queued = probe.find(f"{daemon.base}/events", lambda e: e["event"] == "queued")
        assert [e["id"] for e in queued] == ["kitchen-1"]
    finally:
        probe.close()
        daemon.stop()
    assert PASSWORD not in daemon.log()


def test_wrong_password_is_a_clear_start_error(tmp_path, auth_broker, prepared_state) -> None:
    daemon = secure_daemon(tmp_path, auth_broker, prepared_state, "wrong-" + PASSWORD)
    daemon.start(wait_online=False)
    assert daemon.proc.wait(60) == 1
    log = daemon.log()
    assert "refused the connection" in log and ("password" in log or "authorized" in log)
    assert PASSWORD not in log


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=Magpie Test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    )
    ssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    )
    subprocess.run(["chmod", "0644", "server.key"], check=True, cwd=folder)
    return folder / "ca.crt", folder / "server.crt", folder / "server.key"


@pytest.mark.skipif(not have("openssl"), reason="openssl missing")
def test_tls_with_a_ca_file(tmp_path, prepared_state) -> None:
    ca, cert, key = make_ca(tmp_path)
    broker = Broker(
        tmp_path, f"allow_anonymous true\ncafile {ca}\ncertfile {cert}\nkeyfile {key}\n"
    ).start()
    daemon = make_daemon(tmp_path / "d", broker.port, prepared_state, mqtt__tls_ca=str(ca))
    try:
        daemon.start(wait_online=False)
        probe = Probe(broker.port, ["#"], ca=ca)
        try:
            probe.wait(f"{daemon.base}/status", lambda s: s.get("state") == "online", timeout=60)
            publish(
                broker.port,
                f"{daemon.base}/say",
                json.dumps({"text": "Over TLS.", "id": "tls-1"}),
                "--cafile",
                str(ca),
            )
            probe.wait(
                f"{daemon.base}/events", lambda e: e["id"] == "tls-1" and e["event"] == "finished"
            )
        finally:
            probe.close()
    finally:
        daemon.stop()
        broker.stop()
    time.sleep(0)
