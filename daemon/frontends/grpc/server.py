"""The gRPC server (grpc.aio) on its own event loop thread, like the other network
frontends (../loop_thread.py): it listens on the caller's thread, so a port in use fails
the start with its reason before the service reports ready.

The server takes no more calls at once than the core could have streams (making audio
or waiting for text) plus a few for the voice list; past that gRPC itself answers
RESOURCE_EXHAUSTED. A request message is at most `limits.max_payload_bytes`.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from magpie_tts.daemon.config import Config

from ..base import Frontend, Host
from ..loop_thread import LoopThread
from .gate import Gate
from .service import RivaSynthesis
from .stubs import stubs

log = logging.getLogger(__name__)

SPARE_CALLS = 8  # calls beyond the core's streams (voice lists, refusals)
GRACE_S = 1.0  # at stop, calls in flight get this long to end


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcFrontend(Frontend):
    """NVIDIA Riva's TTS service (`nvidia.riva.tts.RivaSpeechSynthesis`)."""

    name = "grpc"

    def __init__(self, config: Config, host: Host) -> None:
        super().__init__(config, host)
        stubs()  # ConfigError now, with the install hint, if the package is missing
        self.gate = Gate(config)
        self._loop = LoopThread("magpie-grpc")
        self._server: Any = None

    @classmethod
    def enabled(cls, config: Config) -> bool:
        return config.grpc.enabled

    def start(self) -> None:
        section = self.config.grpc
        where = address(section.host, section.port)
        self._loop.start(self._listen(where), f"gRPC {where}")
        log.info("gRPC server (Riva TTS API) on %s", where)

    async def _listen(self, where: str) -> None:
        limits = self.config.limits
        server = grpc.aio.server(
            options=[
                # grpc's default would let a second daemon share the port, silently
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", limits.max_payload_bytes),
            ],
            # (the core's stream capacity as measured at start: the frontend starts then)
            maximum_concurrent_rpcs=(
                self.host.core.slots.max_streams + limits.max_waiting_streams + SPARE_CALLS
            ),
        )
        stubs().tts_grpc.add_RivaSpeechSynthesisServicer_to_server(RivaSynthesis(self), server)
        try:
            server.add_insecure_port(where)
        except RuntimeError as exc:  # grpc's "failed to bind": a port in use, a bad host
            raise OSError(str(exc).split(";")[0]) from None
        await server.start()
        self._server = server

    def stop(self) -> None:
        server = self._server
        if server is not None:
            self._loop.stop(lambda: server.stop(GRACE_S), timeout=GRACE_S + 2)
