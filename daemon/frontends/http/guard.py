"""The HTTP frontend's gate, shared by every route: where a request may come from (its
`Origin`), how its body must be declared and how long it may take to arrive, who may use
the speech routes (the key, failed attempts limited per address), how often (a speech
budget per address, counted on accepted requests only), and refusals logged without a
flood.

Why the Origin and content-type checks: the daemon serves no web pages, so a request that
carries an `Origin` comes from a page somewhere else. A browser sends a cross-origin POST
without asking first only when its body is a "simple" type (text/plain, a form): a page
could make the speaker talk. JSON routes take only `application/json` (which a browser
must ask about first, and nothing here says yes), and any `Origin` not listed in
`http.allowed_origins` is refused, even one naming this host (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web
from magpie_tts.daemon.config import Config

from ..access import Access, Refusal, RefusalLog
from .fields import ApiError

log = logging.getLogger(__name__)

TEXT_BODY_ROUTES = frozenset({"/tts", "/tts/stream"})  # text/plain: the streamed text itself
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def client_of(request: web.Request) -> str:
    return request.remote or "?"


class Guard:
    """One per HTTP frontend: its middleware, response hook, key check and budget."""

    def __init__(self, config: Config) -> None:
        self.allowed_origins = frozenset(config.http.allowed_origins)
        self.read_timeout_s = config.limits.client_read_timeout_s
        # The key (failed attempts limited) and the speech budget, per client address.
        self.access = Access(config.http.resolved_api_key(), config.http.rate_per_minute)
        self.refusals = RefusalLog(log)

    # -- every request: origin, body type, body in time -------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is not None:
            if origin.rstrip("/").lower() not in self.allowed_origins:
                raise ApiError(
                    403,
                    f"requests from web pages ({origin[:80]!r}) are refused: "
                    "list the origin in http.allowed_origins to allow it",
                    "forbidden_origin",
                )
            if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
                return web.Response(status=204, headers=_preflight_headers(request))
        if request.method == "POST" and self._json_body(request):
            await self._read_body(request)
        return await handler(request)

    async def cors_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        """on_response_prepare: an allowed page may read the answer (errors included)."""
        origin = request.headers.get("Origin")
        if origin is not None and origin.rstrip("/").lower() in self.allowed_origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = (
                "Retry-After, X-Sample-Rate, X-Audio-Content-Type"
            )
            response.headers["Vary"] = "Origin"

    def _json_body(self, request: web.Request) -> bool:
        """Whether the POST's body is JSON (to be read here); refused (415) unless it
        is declared as JSON, or text/plain on the routes that take streamed text."""
        kind = request.content_type
        if kind == "application/json":
            return True
        if kind == "text/plain" and request.path in TEXT_BODY_ROUTES:
            return False
        if not request.body_exists and "Content-Type" not in request.headers:
            return False  # no body at all (`/v1/stop`)
        allowed = "application/json"
        if request.path in TEXT_BODY_ROUTES:
            allowed += " (or text/plain: the text itself)"
        raise ApiError(
            415, f"request body must be sent as Content-Type: {allowed}", "unsupported_media_type"
        )

    async def _read_body(self, request: web.Request) -> None:
        """Read the whole body now (the handler's read() gets it), in bounded time."""
        try:  # wait_for, not asyncio.timeout: Python 3.10 boards (Jetsons) too
            await asyncio.wait_for(request.read(), self.read_timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(
                408,
                f"request body not received within {self.read_timeout_s:g} s "
                "(limits.client_read_timeout_s)",
                "timeout",
            ) from None

    # -- the key, and the speech budget ---------------------------------------------------------

    def authenticate(self, request: web.Request) -> None:
        """401 without the right bearer key; past a few failures a minute from one
        address, 429 without even looking at the key (access.py)."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        offered = [token] if scheme.lower() == "bearer" else []
        try:
            self.access.authenticate(client_of(request), offered)
        except Refusal as refusal:
            if refusal.kind != "auth":
                raise _refused(refusal) from None
            raise ApiError(
                401,
                "missing or wrong API key (Authorization: Bearer …)",
                "auth",
                headers={"WWW-Authenticate": 'Bearer realm="magpie-tts"'},
            ) from None

    @contextlib.contextmanager
    def budget(self, request: web.Request) -> Iterator[None]:
        """Around one speech request's admission: 429 when the client's budget is
        spent; the request is counted only if the block succeeds (the core took it)."""
        client = client_of(request)
        try:
            self.access.check_budget(client, "speech requests")
        except Refusal as refusal:
            raise _refused(refusal) from None
        yield
        self.access.spend(client)

    # -- logging ------------------------------------------------------------------------------

    def log_refusal(self, request: web.Request, exc: ApiError) -> None:
        """One WARNING per client and kind a minute, the rest at DEBUG (access.py). The
        kind (`code`), not the message: a message may quote the request (spoken text)."""
        client = client_of(request)
        self.refusals.note(
            client,
            exc.code,
            f"HTTP {request.method} {request.path} from {client}: {exc.status} {exc.code}",
        )


def _refused(refusal: Refusal) -> ApiError:
    """429: too many wrong keys, or the speech budget spent."""
    return ApiError(429, refusal.message, refusal.kind, retry_after=refusal.retry_after)


def _preflight_headers(request: web.Request) -> dict[str, str]:
    """The answer to an allowed page's "may I?": these methods, the headers it asks for."""
    asked = request.headers.get("Access-Control-Request-Headers", "Authorization, Content-Type")
    return {
        "Access-Control-Allow-Methods": "GET, POST",
        "Access-Control-Allow-Headers": asked,
        "Access-Control-Max-Age": "600",
    }
