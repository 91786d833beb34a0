"""Zeroconf (mDNS) advertisement of the Wyoming server, so Home Assistant discovers it."""

from __future__ import annotations

import logging
import socket

from zeroconf import IPVersion, ServiceInfo, Zeroconf

log = logging.getLogger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."


def _address_for(host: str) -> str:
    """The address to advertise: the listening one, or (listening on every interface)
    the one this host uses toward the mDNS group."""
    if host not in ("0.0.0.0", "", "::"):
        return socket.gethostbyname(host)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("224.0.0.251", 5353))  # no packet is sent: this only picks a route
        return probe.getsockname()[0]
    finally:
        probe.close()


def register_wyoming(host: str, port: int, name: str | None = None) -> Zeroconf:
    address = _address_for(host)
    instance = name or f"magpie-{socket.gethostname()}"
    info = ServiceInfo(
        SERVICE_TYPE,
        f"{instance}.{SERVICE_TYPE}",
        addresses=[socket.inet_aton(address)],
        port=port,
        properties={"program": "magpie-tts"},
    )
    zc = Zeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    zc.register_service(info)
    log.info("zeroconf: advertised %s at %s:%d", info.name, address, port)
    return zc
