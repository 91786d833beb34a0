"""gRPC status codes for what the core and the checks answer: one place that says which
refusal or outcome becomes which code."""

from __future__ import annotations

import math

import grpc
from magpie_tts.daemon.core.utterance import Event, Refused

Code = grpc.StatusCode

CODE_OF = {  # Refused.code → status
    "busy": Code.RESOURCE_EXHAUSTED,
    "shutting-down": Code.UNAVAILABLE,
    "duplicate-id": Code.ALREADY_EXISTS,
}


class RpcError(Exception):
    """A call answered with a status other than OK; `kind` is the refusal's code for the
    metrics and the log (never its message: that may quote the text)."""

    def __init__(
        self, code: grpc.StatusCode, message: str, kind: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.retry_after = retry_after

    def trailers(self) -> tuple[tuple[str, str], ...]:
        """`retry-after` (whole seconds) on a RESOURCE_EXHAUSTED: when to try again."""
        if self.code != Code.RESOURCE_EXHAUSTED:
            return ()
        return (("retry-after", str(max(1, math.ceil(self.retry_after or 1)))),)


def refusal(exc: Refused) -> RpcError:
    """The core's refusal as a status: busy → RESOURCE_EXHAUSTED, shutting down →
    UNAVAILABLE, anything about the request itself → INVALID_ARGUMENT."""
    code = CODE_OF.get(exc.code, Code.INVALID_ARGUMENT)
    return RpcError(code, str(exc), exc.code, exc.retry_after)


def failure_of(event: Event) -> RpcError | None:
    """What an outcome that is not the whole audio asked for answers (None: it is)."""
    if event.name == "error":
        problem = str(event.fields.get("error", "synthesis failed"))
        if event.fields.get("code"):  # refused after admission (its voice would not load)
            return RpcError(Code.INVALID_ARGUMENT, problem, str(event.fields["code"]))
        if "speakable" in problem:
            return RpcError(Code.INVALID_ARGUMENT, problem, "empty-text")
        return RpcError(Code.INTERNAL, problem, "synthesis-failed")
    if event.name == "stopped":
        reason = str(event.fields.get("reason", "stopped"))
        if reason == "shutdown":
            return RpcError(Code.UNAVAILABLE, "stopped: the daemon is shutting down", reason)
        if reason == "client gone":  # it took nothing for limits.client_stall_s
            return RpcError(Code.ABORTED, "stopped: the client took no audio", "stalled")
        return RpcError(Code.CANCELLED, f"stopped: {reason}", "stopped")
    if event.fields.get("error"):  # a text stream that went quiet before its end
        return RpcError(Code.DEADLINE_EXCEEDED, str(event.fields["error"]), "stream-idle")
    return None
