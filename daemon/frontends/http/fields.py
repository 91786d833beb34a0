"""HTTP request fields: each wrong value is a clear JSON error with its status."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from ..encoding import OutputError, check

OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable onyx nova sage shimmer verse marin cedar".split()
)


MAX_ID_CHARS = 128  # as MQTT


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str = "invalid_request",
        headers: dict[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = dict(headers or {})
        if status == 429:  # when to try again: whole seconds, at least 1 (unknown: 1)
            self.headers["Retry-After"] = str(max(1, math.ceil(retry_after or 1)))


def error_response(
    status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def string(data: dict[str, Any], key: str, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ApiError(400, f'"{key}" is required', "bad_request")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f'"{key}" must be a string', "bad_request")
    return value


def choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value not in allowed:
        raise ApiError(
            400,
            f'"{key}" must be one of {", ".join(allowed)} (got {str(value)[:40]!r})',
            "unsupported_format" if "format" in key else "bad_request",
        )
    return str(value)


def audio_output(
    data: dict[str, Any], key: str, default: str, query: bool = False
) -> tuple[str, int | None]:
    """The format (`key`) and `sample_rate` (None: the voice's own) asked for, checked
    against what the encoding layer can make; from a query string (`query`) the rate
    is text."""
    fmt, rate = data.get(key, default), data.get("sample_rate")
    if query and isinstance(rate, str):
        rate = int(rate) if rate.isdigit() and len(rate) < 7 else rate
    try:
        check(fmt, rate)
    except OutputError as exc:
        if exc.field == "format":
            raise ApiError(400, exc.message(key), "unsupported_format") from None
        raise ApiError(400, exc.message(), "bad_request") from None
    return fmt, rate


def speed(data: dict[str, Any]) -> float:
    value = data.get("speed", 1.0)
    if not finite(value) or not 0.25 <= value <= 4.0:
        raise ApiError(400, '"speed" must be a number in 0.25..4', "bad_request")
    return float(value)


def number_text(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ApiError(400, f'"{key}" must be a number', "bad_request") from None


def flag(data: dict[str, Any], key: str, query: bool = False) -> bool:
    """A JSON boolean (as MQTT); from a query string (`query`), also its spellings."""
    value = data.get(key, False)
    if query and isinstance(value, str) and value.lower() in QUERY_FLAGS:
        return value.lower() in ("1", "true", "yes")
    if not isinstance(value, bool):
        raise ApiError(400, f'"{key}" must be true or false', "bad_request")
    return value


QUERY_FLAGS = ("1", "true", "yes", "0", "false", "no")


def request_id(data: dict[str, Any]) -> str | None:
    """The client's own id: a string of 1..128 characters, refused otherwise (not cut)."""
    value = data.get("id")
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ApiError(400, f'"id" must be a string of 1..{MAX_ID_CHARS} characters', "bad_request")
    return value


def speaker(data: dict[str, Any]) -> int | str | None:
    """`speaker_id` (or `speaker`): a number or a name; whether the voice has it is the
    core's check (400 `unknown-voice` otherwise)."""
    key = "speaker_id" if data.get("speaker_id") is not None else "speaker"
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise ApiError(400, f'"{key}" must be a number or a name', "bad_request")
    return value


def voice(name: str | None) -> str | None:
    """OpenAI's voice names mean the default voice; others are Magpie voice names."""
    if name is None or name in OPENAI_VOICES:
        return None
    return name
