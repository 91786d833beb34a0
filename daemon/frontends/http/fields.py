"""HTTP request fields: each wrong value is a clear JSON error with its status."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable onyx nova sage shimmer verse marin cedar".split()
)


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def error_response(status: int, message: str, code: str) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return web.json_response(body, status=status)


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


def flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")  # a query string's spelling
    if not isinstance(value, bool):
        raise ApiError(400, f'"{key}" must be true or false', "bad_request")
    return value


def voice(name: str | None) -> str | None:
    """OpenAI's voice names mean the default voice; others are Magpie voice names."""
    if name is None or name in OPENAI_VOICES:
        return None
    return name
