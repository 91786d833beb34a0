"""Home Assistant MQTT discovery: one retained device-based config, so HA shows a
"Magpie TTS" device whose entities use the topics the daemon already serves.

MQTT has no TTS or media-player platform; a speaker maps to a `notify` entity (its
command topic is `<base>/say`, which `notify.send_message` publishes to), a stop
`button`, latency and queue `sensor`s and a `binary_sensor` for speaking, all read from
the retained `<base>/status`, whose `state` (online / offline by Last Will) is the
availability.
"""

from __future__ import annotations

import re
from typing import Any

from .link import Topics

ORIGIN_URL = "https://github.com/magpie-tts/magpie-tts"


def device_id(base_topic: str) -> str:
    return "magpie_" + re.sub(r"[^A-Za-z0-9_-]", "_", base_topic)


def config_topic(prefix: str, base_topic: str) -> str:
    return f"{prefix}/device/{device_id(base_topic)}/config"


def discovery_config(topics: Topics, base_topic: str, version: str) -> dict[str, Any]:
    node = device_id(base_topic)

    def sensor(name: str, template: str, **extra: Any) -> dict[str, Any]:
        return {
            "p": "sensor",
            "name": name,
            "unique_id": f"{node}_{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}",
            "state_topic": topics.status,
            "value_template": template,
            **extra,
        }

    return {
        "dev": {
            "ids": [node],
            "name": "Magpie TTS",
            "mf": "Magpie TTS",
            "mdl": "Magpie TTS speaker",
            "sw": version,
        },
        "o": {"name": "magpie-tts", "sw": version, "url": ORIGIN_URL},
        "availability_topic": topics.status,
        "availability_template": "{{ value_json.state }}",
        "payload_available": "online",
        "payload_not_available": "offline",
        "qos": 1,
        "cmps": {
            "say": {
                "p": "notify",
                "name": "Say",
                "unique_id": f"{node}_say",
                "command_topic": topics.say,
            },
            "stop": {
                "p": "button",
                "name": "Stop speaking",
                "unique_id": f"{node}_stop",
                "command_topic": topics.stop,
                "payload_press": "{}",  # a JSON stop without an id: stop all
            },
            "speaking": {
                "p": "binary_sensor",
                "name": "Speaking",
                "unique_id": f"{node}_speaking",
                "state_topic": topics.status,
                "value_template": "{{ 'ON' if value_json.speaking else 'OFF' }}",
            },
            "ttfa": sensor(
                "First audio p50",
                "{{ value_json.ttfa_ms.p50 if value_json.ttfa_ms is defined else none }}",
                unit_of_measurement="ms",
                state_class="measurement",
                device_class="duration",
                icon="mdi:timer-outline",
            ),
            "queue": sensor(
                "Queue depth",
                "{{ value_json.queue_depth }}",
                state_class="measurement",
                icon="mdi:tray-full",
            ),
            "xruns": sensor(
                "Audio underruns",
                "{{ value_json.xruns }}",
                state_class="total_increasing",
                entity_category="diagnostic",
                icon="mdi:waveform",
            ),
        },
    }
