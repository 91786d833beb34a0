"""Health and metrics routes: what supervisors, load balancers and Prometheus read.

`/health` is for alerts (503 while loading or degraded), `/health/live` for restarts
(503 only when a worker thread is stuck), `/health/ready` for load balancers (a replica
on its fallback voice still speaks, so it stays ready), `/metrics` for Prometheus.
"""

from __future__ import annotations

from aiohttp import web
from magpie_tts.daemon.metrics import CONTENT_TYPE

from ..base import Host
from .fields import ApiError


class HealthRoutes:
    def __init__(self, host: Host) -> None:
        self.host = host

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/health", self.health),
            web.get("/health/live", self.live),
            web.get("/health/ready", self.readiness),
            web.get("/metrics", self.metrics),
        ]

    async def health(self, request: web.Request) -> web.StreamResponse:
        if not self.host.ready:
            return web.json_response({"state": "loading"}, status=503)
        status = self.host.status()
        body = {
            "state": "ready",
            "health": status["health"],
            "version": self.host.version,
            "provider": status["provider"],
            "precision": status["precision"],
            "int8": status.get("int8"),  # a background preparation's state and progress
            "selftest": status.get("selftest"),
            "capacity": status.get("capacity"),  # client streams admitted at once
        }
        if status["health"] != "ok" or not self.host.healthy:
            body["state"] = "degraded"
            body["degraded"] = status.get("degraded", "a worker thread is stuck")
            return web.json_response(body, status=503)
        return web.json_response(body)

    async def live(self, request: web.Request) -> web.StreamResponse:
        """Liveness (a supervisor restarts on 503): no worker thread is stuck. Loading and
        degraded (on the fallback voice) are alive: a restart would not cure them."""
        if self.host.ready and not self.host.healthy:
            return web.json_response({"state": "stuck"}, status=503)
        return web.json_response({"state": "alive"})

    async def readiness(self, request: web.Request) -> web.StreamResponse:
        """Readiness (a load balancer sends requests on 200): loaded and serving, degraded
        included: a replica on its fallback voice still speaks, and taking every degraded
        replica out could leave none. /health says 503 for degraded, for alerts."""
        if not self.host.ready or not self.host.healthy:
            state = "loading" if not self.host.ready else "stuck"
            return web.json_response({"state": state}, status=503)
        return web.json_response({"state": "ready", "health": self.host.status()["health"]})

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if not self.host.ready:
            raise ApiError(503, "loading: the voice is not ready yet", "loading")
        return web.Response(body=self.host.metrics_text(), headers={"Content-Type": CONTENT_TYPE})
