"""Parse MQTT payloads into asks; every rejection says why (PayloadError).

Only the envelope is checked here (UTF-8, JSON, field types and ranges); what the text
may contain is the engine's text policy, applied by the core on submission.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from magpie_tts.daemon.core.utterance import PRIORITIES, Ask, Refused

__all__ = ["PRIORITIES", "PayloadError", "StreamPiece", "parse_say", "parse_stream"]


class PayloadError(Refused):
    """A message that cannot be accepted; str() is the reason sent on the error topic."""


@contextlib.contextmanager
def _blame(data: dict[str, Any]) -> Iterator[None]:
    """Errors name the sender's own id, or none: never an id the sender did not choose."""
    try:
        yield
    except PayloadError as exc:
        given = data.get("id")
        exc.request_id = str(given) if isinstance(given, (str, int)) else None
        raise


def decode_utf8(payload: bytes, limit: int) -> str:
    if len(payload) > limit:
        raise PayloadError(f"payload too large: {len(payload)} bytes (limit {limit})")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"payload is not valid UTF-8 (byte {exc.start})") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except RecursionError:
        raise PayloadError("invalid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} col {exc.colno}"
        raise PayloadError(f"invalid JSON: {exc.msg} at {where}") from None
    if not isinstance(value, dict):
        raise PayloadError(f"JSON payload must be an object, got {type(value).__name__}")
    return value


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = data.get(name, default)
    if value is None:
        return default
    if kind in (int, float) or kind == (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PayloadError(f"field {name!r} must be a number")
        if value != value or value in (float("inf"), float("-inf")):
            raise PayloadError(f"field {name!r} must be a finite number")
        return float(value)
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise PayloadError(f"field {name!r} must be {expected}")
    return value


def _request_id(data: dict[str, Any]) -> str:
    value = data.get("id")
    if value is None:
        return uuid.uuid4().hex[:12]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PayloadError("field 'id' must be a string or integer")
    value = str(value)
    if not 0 < len(value) <= 128:
        raise PayloadError("field 'id' must be 1..128 characters")
    return value


def _ranged(data: dict[str, Any], name: str, low: float, high: float) -> float:
    value = _field(data, name, (int, float), 1.0)
    if not low <= value <= high:
        raise PayloadError(f"{name} {value:g} outside {low:g}..{high:g}")
    return value


def _options(data: dict[str, Any]) -> dict[str, Any]:
    speaker = data.get("speaker")
    if speaker is not None and (isinstance(speaker, bool) or not isinstance(speaker, (int, str))):
        raise PayloadError("field 'speaker' must be a speaker id or name")
    priority = _field(data, "priority", str, "normal")
    if priority not in PRIORITIES:
        raise PayloadError(f"priority {priority!r} is not one of {', '.join(PRIORITIES)}")
    return {
        "voice": _field(data, "voice", str, None),
        "speaker": speaker,
        "speed": _ranged(data, "speed", 0.25, 4.0),
        "volume": _ranged(data, "volume", 0.0, 2.0),
        "priority": priority,
        "cacheable": _field(data, "cache", bool, False),
        "custom_dictionary": _field(data, "custom_dictionary", str, None),
        "marks": _field(data, "marks", bool, False),
    }


def _text(data: dict[str, Any], required: bool = True) -> str:
    text = data.get("text", "")
    if not isinstance(text, str):
        raise PayloadError("field 'text' must be a string")
    if required and not text.strip():
        raise PayloadError("text is empty")
    return text


def parse_say(payload: bytes, limit: int, arrived: float | None = None) -> Ask:
    """`<base>/say`: plain UTF-8 text, or a JSON object with text and options."""
    text = decode_utf8(payload, limit)
    if not text.strip():
        raise PayloadError("text is empty")
    stamp = {} if arrived is None else {"received_at": arrived}
    if text.lstrip().startswith("{"):
        data = _json_object(text)
        with _blame(data):
            return Ask(id=_request_id(data), text=_text(data), **_options(data), **stamp)
    return Ask(id=uuid.uuid4().hex[:12], text=text, **stamp)


@dataclass
class StreamPiece:
    ask: Ask  # options apply from the first piece of a stream
    text: str
    final: bool

    @property
    def id(self) -> str:
        return self.ask.id


def parse_stream(payload: bytes, limit: int, arrived: float | None = None) -> StreamPiece:
    """`<base>/say/stream`: {"id", "text", "final", options...}."""
    data = _json_object(decode_utf8(payload, limit))
    if data.get("id") is None:
        raise PayloadError("stream piece needs an 'id'")
    with _blame(data):
        final = data.get("final", False)
        if not isinstance(final, bool):
            raise PayloadError("field 'final' must be true or false")
        stamp = {} if arrived is None else {"received_at": arrived}
        ask = Ask(id=_request_id(data), source="stream", **_options(data), **stamp)
        return StreamPiece(ask, _text(data, required=False), final)


def parse_stop(payload: bytes, limit: int) -> str | None:
    """`<base>/stop`: empty, plain id, or {"id": ...}; None stops everything."""
    text = decode_utf8(payload, limit).strip()
    if not text:
        return None
    if text.startswith("{"):
        data = _json_object(text)
        return _request_id(data) if data.get("id") is not None else None
    return text[:128]


def parse_hermes(payload: bytes, limit: int, arrived: float | None = None) -> Ask:
    """`hermes/tts/say` (Rhasspy 2.5 / Snips): text, siteId, lang, id, sessionId, volume."""
    data = _json_object(decode_utf8(payload, limit))
    with _blame(data):
        stamp = {} if arrived is None else {"received_at": arrived}
        return Ask(
            id=_request_id(data),
            source="hermes",
            site_id=_field(data, "siteId", str, "default"),
            session_id=_field(data, "sessionId", str, None),
            text=_text(data),
            volume=_ranged(data, "volume", 0.0, 2.0),
            **stamp,
        )


def hermes_context(payload: bytes) -> dict[str, Any]:
    """Best-effort siteId/sessionId/id of a Hermes (or any JSON) message, also of one that
    is refused unparsed."""
    try:
        data = json.loads(payload.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in ("siteId", "sessionId", "id") if isinstance(data.get(k), str)}
