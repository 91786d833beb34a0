"""Who may call, and how often: the daemon's API key (`http.api_key_file`, the one key of
its network APIs), failed attempts limited per address, a speech budget per address
(`grpc.rate_per_minute`), and refusals logged without a flood: ../access.py, shared
with HTTP's guard; here the key is found in gRPC metadata and refusals become statuses.

The key comes as `authorization: Bearer <key>` (what NVIDIA's hosted API takes, e.g.
`riva.client.Auth(metadata_args=[["authorization", "Bearer …"]])`) or as `x-api-key`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import grpc
from magpie_tts.daemon.config import Config

from ..access import Access, Refusal, RefusalLog
from .status import RpcError

log = logging.getLogger(__name__)


def client_of(context: Any) -> str:
    """The caller's address without its port (`ipv4:127.0.0.1:5123` → `ipv4:127.0.0.1`)."""
    peer = str(context.peer() or "?")
    return peer.rsplit(":", 1)[0] if peer.count(":") > 1 else peer


class Gate:
    def __init__(self, config: Config) -> None:
        # The key (failed attempts limited) and the speech budget, per client address.
        self.access = Access(config.http.resolved_api_key(), config.grpc.rate_per_minute)
        self.refusals = RefusalLog(log)

    def authenticate(self, context: Any) -> None:
        """UNAUTHENTICATED without the right key; past a few failures a minute from one
        address, RESOURCE_EXHAUSTED without even looking at the key (access.py)."""
        try:
            self.access.authenticate(client_of(context), _offered(context))
        except Refusal as refusal:
            if refusal.kind != "auth":
                raise _refused(refusal) from None
            raise RpcError(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong API key (metadata authorization: Bearer …, or x-api-key)",
                "auth",
            ) from None

    @contextlib.contextmanager
    def budget(self, context: Any) -> Iterator[None]:
        """Around one call's admission: RESOURCE_EXHAUSTED when the address's budget is
        spent; counted only if the block succeeds (the core took it)."""
        client = client_of(context)
        try:
            self.access.check_budget(client, "calls")
        except Refusal as refusal:
            raise _refused(refusal) from None
        yield
        self.access.spend(client)

    def log_refusal(self, context: Any, method: str, error: RpcError) -> None:
        """One WARNING per address and kind a minute, the rest at DEBUG (access.py); the
        kind, never the message (it may quote the text)."""
        client = client_of(context)
        description = f"gRPC {method} from {client}: {error.code.name} {error.kind}"
        self.refusals.note(client, error.kind, description)


def _offered(context: Any) -> list[str]:
    """The keys a call offers: `authorization: Bearer <key>` and `x-api-key: <key>`."""
    offered = []
    for name, value in context.invocation_metadata() or ():
        given = value.decode() if isinstance(value, bytes) else str(value)
        if name == "authorization":
            scheme, _, token = given.partition(" ")
            if scheme.lower() == "bearer":
                offered.append(token)
        elif name == "x-api-key":
            offered.append(given)
    return offered


def _refused(refusal: Refusal) -> RpcError:
    """RESOURCE_EXHAUSTED: too many wrong keys, or the speech budget spent."""
    return RpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        refusal.message,
        refusal.kind,
        retry_after=refusal.retry_after,
    )
