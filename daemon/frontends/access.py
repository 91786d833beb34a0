"""Who may call a network frontend, and how often, whatever its transport: the daemon's
API key (`http.api_key_file`, the one key of its network APIs) with failed attempts
limited per address, a speech budget per address, and refusals logged without a flood.

HTTP (http/guard.py) and gRPC (grpc/gate.py) each find the offered key in their own
headers and translate a `Refusal` into their own status; the arithmetic is here once.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Iterable

from magpie_tts.daemon.core.rate import RateLimit

AUTH_FAILURES_PER_MINUTE = 10  # wrong keys from one address; past this: refused unchecked
LOG_INTERVAL_S = 60.0  # one WARNING per address and kind of refusal per interval
MAX_LOG_KEYS = 10_000


class Refusal(Exception):
    """`kind`: "auth_locked" (too many wrong keys: the key is not even looked at), "auth"
    (no right key offered) or "busy" (the address's speech budget is spent)."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.retry_after = kind, message, retry_after


class Access:
    def __init__(self, api_key: str | None, per_minute: int) -> None:
        self.api_key = api_key
        self.speech = RateLimit(per_minute)  # per client address
        self.failures = RateLimit(AUTH_FAILURES_PER_MINUTE)  # per client address

    def authenticate(self, client: str, offered: Iterable[str]) -> None:
        """Nothing when no key is configured or one offered matches it; else a Refusal,
        counted against the address (past a few a minute, the key goes unchecked: no
        guessing at speed)."""
        if self.api_key is None:
            return
        wait = self.failures.retry_after(client)
        if wait > 0:
            message = f"too many failed authentications from {client}: try again later"
            raise Refusal("auth_locked", message, wait)
        key = self.api_key.encode()
        if not any(hmac.compare_digest(token.strip().encode(), key) for token in offered):
            self.failures.take(client)
            raise Refusal("auth", "missing or wrong API key")

    def check_budget(self, client: str, requests: str) -> None:
        """A "busy" Refusal when the address's speech budget is spent; `requests` names
        them in the message ("speech requests", "calls"). A request counts only once
        the core took it: `spend`."""
        wait = self.speech.retry_after(client)
        if wait > 0:
            message = f"rate limit: more than {self.speech.per_minute} {requests} per minute"
            raise Refusal("busy", message, wait)

    def spend(self, client: str) -> None:
        self.speech.take(client)


class RefusalLog:
    """One WARNING per address and kind of refusal a minute, saying how many were quieted
    since; the rest at DEBUG: a client hammering wrong requests does not flood the log.
    The caller describes the refusal by its kind, never its message (it may quote the
    spoken text)."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._warned: dict[tuple[str, str], list[float]] = {}  # → [last warning, quieted]

    def note(self, client: str, kind: str, description: str) -> None:
        key = (client, kind)
        now = time.monotonic()
        seen = self._warned.get(key)
        if seen is not None and now - seen[0] < LOG_INTERVAL_S:
            seen[1] += 1
            self._log.debug("%s", description)
            return
        if len(self._warned) >= MAX_LOG_KEYS:
            self._warned = {k: v for k, v in self._warned.items() if now - v[0] < LOG_INTERVAL_S}
        quieted = ""
        if seen is not None and seen[1]:
            quieted = f" ({int(seen[1])} more like it since the last warning)"
        self._warned[key] = [now, 0]
        self._log.warning("%s%s", description, quieted)
