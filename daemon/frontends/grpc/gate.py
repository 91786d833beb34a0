"""Who may call, and how often: the daemon's API key (`http.api_key_file`, the one key of
its network APIs), failed attempts limited per address, a speech budget per address
(`grpc.rate_per_minute`), and refusals logged without a flood. As HTTP's guard
(../http/guard.py), for gRPC metadata.

The key comes as `authorization: Bearer <key>` (what NVIDIA's hosted API takes, e.g.
`riva.client.Auth(metadata_args=[["authorization", "Bearer …"]])`) or as `x-api-key`.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import Iterator
from typing import Any

import grpc
from magpie_tts.daemon.config import Config
from magpie_tts.daemon.core.rate import RateLimit

from .status import RpcError

log = logging.getLogger(__name__)

AUTH_FAILURES_PER_MINUTE = 10  # wrong keys from one address; past this: refused unchecked
LOG_INTERVAL_S = 60.0  # one WARNING per address and kind of refusal per interval
MAX_LOG_KEYS = 10_000


def client_of(context: Any) -> str:
    """The caller's address without its port (`ipv4:127.0.0.1:5123` → `ipv4:127.0.0.1`)."""
    peer = str(context.peer() or "?")
    return peer.rsplit(":", 1)[0] if peer.count(":") > 1 else peer


class Gate:
    def __init__(self, config: Config) -> None:
        self.api_key = config.http.resolved_api_key()
        self.speech = RateLimit(config.grpc.rate_per_minute)  # per client address
        self.failures = RateLimit(AUTH_FAILURES_PER_MINUTE)  # per client address
        self._warned: dict[tuple[str, str], float] = {}

    def authenticate(self, context: Any) -> None:
        """UNAUTHENTICATED without the right key; past a few failures a minute from one
        address, RESOURCE_EXHAUSTED without even looking at the key."""
        if self.api_key is None:
            return
        client = client_of(context)
        wait = self.failures.retry_after(client)
        if wait > 0:
            raise RpcError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many failed authentications from {client}: try again later",
                "auth_locked",
                retry_after=wait,
            )
        if not self._has_key(context.invocation_metadata() or ()):
            self.failures.take(client)
            raise RpcError(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong API key (metadata authorization: Bearer …, or x-api-key)",
                "auth",
            )

    def _has_key(self, metadata: Any) -> bool:
        assert self.api_key is not None
        key = self.api_key.encode()
        for name, value in metadata:
            given = value.decode() if isinstance(value, bytes) else str(value)
            if name == "authorization":
                scheme, _, token = given.partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key):
                    return True
            elif name == "x-api-key" and hmac.compare_digest(given.strip().encode(), key):
                return True
        return False

    @contextlib.contextmanager
    def budget(self, context: Any) -> Iterator[None]:
        """Around one call's admission: RESOURCE_EXHAUSTED when the address's budget is
        spent; counted only if the block succeeds (the core took it)."""
        client = client_of(context)
        wait = self.speech.retry_after(client)
        if wait > 0:
            raise RpcError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"rate limit: more than {self.speech.per_minute} calls per minute",
                "busy",
                retry_after=wait,
            )
        yield
        self.speech.take(client)

    def log_refusal(self, context: Any, method: str, error: RpcError) -> None:
        """One WARNING per address and kind a minute, the rest at DEBUG; the kind, never
        the message (it may quote the text)."""
        key = (client_of(context), error.kind)
        now = time.monotonic()
        if now - self._warned.get(key, -LOG_INTERVAL_S) < LOG_INTERVAL_S:
            log.debug("gRPC %s from %s: %s %s", method, key[0], error.code.name, error.kind)
            return
        if len(self._warned) >= MAX_LOG_KEYS:
            self._warned = {k: t for k, t in self._warned.items() if now - t < LOG_INTERVAL_S}
        self._warned[key] = now
        log.warning("gRPC %s from %s: %s %s", method, key[0], error.code.name, error.kind)
