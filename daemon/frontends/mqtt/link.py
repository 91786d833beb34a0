"""paho-mqtt link: persistent QoS 1 session, Last Will, TLS/auth, reconnect with backoff."""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from magpie_tts.daemon.config import MqttConfig

log = logging.getLogger(__name__)

# CONNACK codes after which retrying cannot help: wrong credentials, not allowed, bad id.
_FATAL_CONNACK = {"Bad user name or password", "Not authorized", "Client identifier not valid"}


class ConnectError(Exception):
    """The broker refused us for a reason a retry will not fix."""


class Topics:
    def __init__(self, base: str, discovery_prefix: str | None = None) -> None:
        self.say = f"{base}/say"
        self.stream = f"{base}/say/stream"
        self.stop = f"{base}/stop"
        self.status = f"{base}/status"
        self.events = f"{base}/events"
        self.error = f"{base}/error"
        self.hermes_say = "hermes/tts/say"
        self.hermes_finished = "hermes/tts/sayFinished"
        self.hermes_error = "hermes/error/tts"
        # Home Assistant's birth message: re-publish discovery when it comes online.
        self.ha_status = f"{discovery_prefix}/status" if discovery_prefix else None

    def subscriptions(self, hermes: bool) -> list[str]:
        topics = [self.say, self.stream, self.stop]
        if hermes:
            topics.append(self.hermes_say)
        if self.ha_status:
            topics.append(self.ha_status)
        return topics


class MqttLink:
    def __init__(
        self,
        config: MqttConfig,
        topics: Topics,
        on_message: Callable[[str, bytes, float, bool, bool], None],
        on_connected: Callable[[], None],
        offline_status: dict[str, Any],
    ) -> None:
        self.config = config
        self.topics = topics
        self._on_message = on_message
        self._on_connected = on_connected
        self.connected = threading.Event()
        self.refused: str | None = None
        self.connects = 0
        self._closing = False
        self._first_result = threading.Event()
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=config.client_id,
            clean_session=False,  # the broker keeps our QoS 1 requests while we are away
            protocol=mqtt.MQTTv311,
        )
        if config.username:
            client.username_pw_set(config.username, config.resolved_password())
        if config.tls_ca or config.tls_cert:
            client.tls_set(
                ca_certs=str(config.tls_ca) if config.tls_ca else None,
                certfile=str(config.tls_cert) if config.tls_cert else None,
                keyfile=str(config.tls_key) if config.tls_key else None,
                tls_version=ssl.PROTOCOL_TLS_CLIENT,
            )
        client.will_set(topics.status, json.dumps(offline_status), qos=1, retain=True)
        client.reconnect_delay_set(min_delay=1, max_delay=max(1, int(config.reconnect_max_s)))
        client.max_queued_messages_set(1000)
        client.on_connect = self._connected
        client.on_disconnect = self._disconnected
        client.on_message = self._message
        self.client = client

    def start(self, wait_s: float = 10.0) -> None:
        """Connect in the background; raise ConnectError only for refusals retries can't fix."""
        where = f"{self.config.host}:{self.config.port}"
        try:
            self.client.connect_async(self.config.host, self.config.port, self.config.keepalive)
        except (OSError, ValueError) as exc:
            raise ConnectError(f"MQTT broker {where}: {exc}") from exc
        self.client.loop_start()
        if not self._first_result.wait(wait_s):
            log.warning("MQTT broker %s not reachable yet; retrying in the background", where)
        if self.refused is not None:
            self.client.loop_stop()
            raise ConnectError(f"MQTT broker {where} refused the connection: {self.refused}")

    def _connected(
        self, client: mqtt.Client, _userdata: Any, flags: Any, reason: Any, _properties: Any
    ) -> None:
        if reason.is_failure:
            log.error("MQTT connection refused: %s", reason)
            if str(reason) in _FATAL_CONNACK:
                self.refused = str(reason)
                client.disconnect()
            self._first_result.set()
            return
        self.connects += 1
        log.info(
            "MQTT connected to %s:%s (session present: %s)",
            self.config.host,
            self.config.port,
            flags.session_present,
        )
        # Resubscribe every time: a broker restart without persistence forgets the session.
        client.subscribe([(topic, 1) for topic in self.topics.subscriptions(self.config.hermes)])
        self.connected.set()
        self._first_result.set()
        self._on_connected()

    def _disconnected(
        self, _client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _properties: Any
    ) -> None:
        self.connected.clear()
        if self.refused is None and not self._closing:
            log.warning("MQTT disconnected (%s); reconnecting with backoff", reason)

    def _message(self, _client: mqtt.Client, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        arrived = time.monotonic()
        # `retain` is set only on a copy from the broker's retained store, sent at each
        # (re)subscribe (MQTT 3.1.1 §3.3.1.3; in 5.0 too unless Retain As Published): a
        # live message, or one queued for our session while we were away, comes without it.
        flags = bool(message.dup), bool(message.retain)
        try:
            self._on_message(message.topic, message.payload, arrived, *flags)
        except Exception:  # a bug in one handler must not kill paho's network thread
            log.exception("error handling message on %s", message.topic)

    def publish(self, topic: str, payload: dict[str, Any] | str, retain: bool = False) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        self.client.publish(topic, data, qos=1, retain=retain)

    def stop(self, final_status: dict[str, Any]) -> None:
        self._closing = True
        if self.connected.is_set():
            info = self.client.publish(self.topics.status, json.dumps(final_status), 1, True)
            with contextlib.suppress(RuntimeError, ValueError):
                info.wait_for_publish(2.0)
        self.client.disconnect()
        self.client.loop_stop()
