"""The daemon's frontends: each translates one protocol to the core (see base.py).

`FRONTENDS` lists them in start order: HTTP first (it answers `/health` while the voice
loads), Wyoming and gRPC before MQTT (a port in use fails the start before the broker
hears of us).
"""

from __future__ import annotations

from .base import Frontend, Host
from .grpc.server import GrpcFrontend
from .http.server import HttpFrontend
from .mqtt.frontend import MqttFrontend
from .wyoming.server import WyomingFrontend

FRONTENDS: tuple[type[Frontend], ...] = (
    HttpFrontend,
    WyomingFrontend,
    GrpcFrontend,
    MqttFrontend,
)

__all__ = [
    "FRONTENDS",
    "Frontend",
    "GrpcFrontend",
    "Host",
    "HttpFrontend",
    "MqttFrontend",
    "WyomingFrontend",
]
