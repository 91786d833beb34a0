"""The MQTT frontend: topics and Hermes in, events, errors and retained status out.

It only translates: payloads become asks for the core, the core's events become
messages. It never reaches into an utterance's state.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
from typing import Any

from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.utterance import Event, Refused, Utterance, shown_id

from ..base import Frontend, Host
from .ha_discovery import config_topic, discovery_config
from .link import MqttLink, Topics
from .payloads import (
    hermes_context,
    parse_hermes,
    parse_say,
    parse_stop,
    parse_stream,
)

log = logging.getLogger(__name__)

# A retained command would be spoken (or stop speech) again at every start, restart and
# broker reconnect: commands count only as they are published.
RETAINED = (
    "retained message ignored: commands are taken only when published, not from the "
    "broker's retained store; clear it with an empty retained message "
    "(mosquitto_pub -r -n -t <topic>)"
)


class MqttFrontend(Frontend):
    name = "mqtt"

    def __init__(self, config: Config, host: Host) -> None:
        super().__init__(config, host)
        self.core = host.core
        section = config.mqtt
        self.topics = Topics(
            section.base_topic, section.discovery_prefix if section.ha_discovery else None
        )
        self._offline = offline_status = {"state": "offline", "version": host.version}
        self._recent: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._recent_lock = threading.Lock()
        self.link = MqttLink(
            config.mqtt, self.topics, self._on_message, self._on_connected, offline_status
        )

    @classmethod
    def enabled(cls, config: Config) -> bool:
        return config.mqtt.enabled

    def start(self) -> None:
        self.link.start()

    def stop(self) -> None:
        self.link.stop(self._offline)

    @property
    def reconnects(self) -> int:
        return max(0, self.link.connects - 1)

    def status(self) -> dict[str, Any]:
        return {"mqtt_reconnects": self.reconnects}

    def observe(self, utterance: Utterance, event: Event) -> None:
        """Every utterance's events: speech on the speaker asked for elsewhere (HTTP
        /v1/say, the audible self-test) is reported on <base>/events like MQTT's own, and
        the retained status follows the queue."""
        if utterance.audio_out is None and utterance.sink is not self:
            self.report(utterance, event)
        if event.terminal or event.name == "interrupted":
            self.publish_status()

    def audio_changed(self, problem: str | None) -> None:
        if problem is not None:
            self._publish_error(problem, "audio", None, None)
        self.publish_status()

    def health_changed(self) -> None:
        self.publish_status()

    # -- out -------------------------------------------------------------------------------

    def publish_status(self) -> None:
        self.link.publish(self.topics.status, self.host.status(), retain=True)

    def _on_connected(self) -> None:
        self.publish_discovery()
        self.publish_status()

    def publish_discovery(self) -> None:
        section = self.config.mqtt
        if not section.ha_discovery:
            return
        topic = config_topic(section.discovery_prefix, section.base_topic)
        payload = discovery_config(self.topics, section.base_topic, self.host.version)
        self.link.publish(topic, payload, retain=True)

    def report(self, utterance: Utterance, event: Event) -> None:
        """The core's events for utterances this frontend asked for (the Sink)."""
        ask = utterance.ask
        self.link.publish(
            self.topics.events,
            {"id": ask.id, "event": event.name, "source": ask.source, **event.fields},
        )
        if not event.terminal:
            return
        problem = event.fields.get("error")
        if problem:  # failed, or finished with a warning (stream without final)
            self._publish_error(
                problem, self._topic_of(ask.source), ask.id, self._hermes(utterance)
            )
        if ask.source == "hermes":
            self.link.publish(
                self.topics.hermes_finished,
                {"id": ask.id, "siteId": ask.site_id, "sessionId": ask.session_id},
            )

    def _hermes(self, utterance: Utterance) -> dict[str, Any] | None:
        ask = utterance.ask
        if ask.source != "hermes":
            return None
        return {"siteId": ask.site_id, "sessionId": ask.session_id}

    def _topic_of(self, source: str) -> str:
        return {
            "say": self.topics.say,
            "stream": self.topics.stream,
            "hermes": self.topics.hermes_say,
        }.get(source, source)

    def reject(
        self,
        reason: str,
        topic: str,
        request_id: str | None = None,
        hermes: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        """One clear error per rejected input: error topic, journal, Hermes if it came so.

        The journal gets the kind of refusal and the id, never the reason: a reason may
        quote a piece of the message, and spoken text stays out of the log."""
        kind = code or Refused(reason).code
        self.core.refused(self.name, kind)
        log.warning("rejected message on %s (id=%s): %s", topic, shown_id(request_id), kind)
        self._publish_error(reason, topic, request_id, hermes, kind)

    def _publish_error(
        self,
        reason: str,
        topic: str,
        request_id: str | None,
        hermes: dict[str, Any] | None,
        code: str | None = None,
    ) -> None:
        error: dict[str, Any] = {"id": request_id, "topic": topic, "error": reason}
        if code is not None:
            error["code"] = code  # busy: shed or over a limit, try again later
        self.link.publish(self.topics.error, error)
        if hermes is not None:
            self.link.publish(
                self.topics.hermes_error,
                {
                    "error": reason,
                    "siteId": hermes.get("siteId", self.config.mqtt.site_id),
                    "sessionId": hermes.get("sessionId"),
                    "context": topic,
                },
            )

    # -- in (paho's network thread) ----------------------------------------------------------

    def _duplicate(self, topic: str, payload: bytes, dup: bool) -> bool:
        # QoS 1 is at-least-once: after a reconnect the broker resends what we may already
        # have taken (DUP flag). Speak each message once.
        digest = hashlib.blake2b(topic.encode() + b"\0" + payload, digest_size=16).digest()
        with self._recent_lock:
            if dup and digest in self._recent:
                return True
            self._recent[digest] = None
            while len(self._recent) > 2000:
                self._recent.popitem(last=False)
        return False

    def _ignore_retained(self, topic: str, payload: bytes, hermes: dict[str, Any] | None) -> None:
        """A copy from the broker's retained store, handed over at each (re)subscribe: no
        command. Answered at each delivery (every connect, while it stays retained)."""
        given = hermes_context(payload).get("id")
        self.core.refused(self.name, "retained")
        log.warning(
            "ignored a retained message on %s (id=%s): commands count only as published; "
            "clear it with an empty retained message",
            topic,
            given,
        )
        self._publish_error(RETAINED, topic, given, hermes)

    def _on_message(
        self, topic: str, payload: bytes, arrived: float, dup: bool = False, retained: bool = False
    ) -> None:
        hermes = None
        if topic == self.topics.ha_status:
            if payload.strip() == b"online":  # HA restarted: it forgot non-retained state
                self._on_connected()
            return
        if topic == self.topics.hermes_say:
            hermes = hermes_context(payload)
            if hermes.get("siteId", "default") != self.config.mqtt.site_id:
                log.debug("hermes say for site %s ignored", hermes.get("siteId"))
                return  # another site's traffic, valid or not, is not ours to answer
        if retained:
            self._ignore_retained(topic, payload, hermes)
            return
        if self._duplicate(topic, payload, dup):
            log.info("dropping redelivered duplicate on %s", topic)
            return
        limit = self.config.limits.max_payload_bytes
        try:
            if topic == self.topics.say:
                self.core.submit(parse_say(payload, limit, arrived), self)
            elif topic == self.topics.stream:
                piece = parse_stream(payload, limit, arrived)
                self.core.feed_stream(piece.ask, piece.text, piece.final, self)
            elif topic == self.topics.stop:
                request_id = parse_stop(payload, limit)
                if not self.core.stop(self.name, request_id) and request_id is not None:
                    raise Refused(
                        f"no utterance with id {request_id!r} is queued or speaking",
                        request_id,
                        code="unknown-id",
                    )
            elif topic == self.topics.hermes_say:
                self.core.submit(parse_hermes(payload, limit, arrived), self)
        except Refused as exc:
            self.reject(str(exc), topic, exc.request_id, hermes, exc.code)
