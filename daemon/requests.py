"""Parse MQTT payloads into speech requests; every rejection says why (PayloadError)."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import time
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from magpie_tts.engine import StopToken
from magpie_tts.engine.synth import TextStream

PRIORITIES = {"alert": 0, "normal": 1, "low": 2}
_sequence = itertools.count()


class PayloadError(ValueError):
    """A message that cannot be accepted; str() is the reason sent on the error topic."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.request_id = request_id


@dataclass(eq=False)
class Request:
    id: str
    text: str = ""
    source: str = "say"  # say | stream | hermes
    voice: str | None = None
    speed: float = 1.0
    volume: float = 1.0
    speaker: int | str | None = None  # multi-speaker voices: id or name
    priority: str = "normal"
    site_id: str | None = None
    session_id: str | None = None
    received_at: float = field(default_factory=time.monotonic)
    sequence: int = field(default_factory=lambda: next(_sequence))
    stream: TextStream | None = None
    units: list[str] | None = None  # normalized synthesis units, once validated
    stop: StopToken = field(default_factory=StopToken)
    stop_reason: str | None = None
    preempted: bool = False
    stream_timed_out: bool = False

    @property
    def rank(self) -> tuple[int, int]:
        return PRIORITIES[self.priority], self.sequence


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


def _options(data: dict[str, Any], request: Request) -> None:
    request.voice = _field(data, "voice", str, None)
    speaker = data.get("speaker")
    if speaker is not None and (isinstance(speaker, bool) or not isinstance(speaker, (int, str))):
        raise PayloadError("field 'speaker' must be a speaker id or name", request.id)
    request.speaker = speaker
    request.speed = _field(data, "speed", (int, float), 1.0)
    if not 0.25 <= request.speed <= 4.0:
        raise PayloadError(f"speed {request.speed} outside 0.25..4.0", request.id)
    request.volume = _field(data, "volume", (int, float), 1.0)
    if not 0.0 <= request.volume <= 2.0:
        raise PayloadError(f"volume {request.volume} outside 0..2", request.id)
    priority = _field(data, "priority", str, "normal")
    if priority not in PRIORITIES:
        raise PayloadError(
            f"priority {priority!r} is not one of {', '.join(PRIORITIES)}", request.id
        )
    request.priority = priority


_MARKUP = re.compile(r"<[A-Za-z/!?][^<>]*>")


def check_text(text: str, request_id: str | None = None) -> str:
    """Refuse what a speaker must not read out: control characters and markup."""
    for char in text:
        if unicodedata.category(char) == "Cc" and char not in "\t\n\r":
            raise PayloadError(f"text contains a control character (U+{ord(char):04X})", request_id)
    tag = _MARKUP.search(text)
    if tag:
        raise PayloadError(
            f"markup is not supported ({tag[0][:40]!r}): send plain text", request_id
        )
    return text


def _text(data: dict[str, Any], request_id: str | None, required: bool = True) -> str:
    text = data.get("text", "")
    if not isinstance(text, str):
        raise PayloadError("field 'text' must be a string", request_id)
    if required and not text.strip():
        raise PayloadError("text is empty", request_id)
    return check_text(text, request_id)


def parse_say(payload: bytes, limit: int) -> Request:
    """`<base>/say`: plain UTF-8 text, or a JSON object with text and options."""
    text = decode_utf8(payload, limit)
    if not text.strip():
        raise PayloadError("text is empty")
    if text.lstrip().startswith("{"):
        data = _json_object(text)
        with _blame(data):
            request = Request(id=_request_id(data))
            request.text = _text(data, request.id)
            _options(data, request)
        return request
    return Request(id=uuid.uuid4().hex[:12], text=check_text(text))


@dataclass
class StreamPiece:
    id: str
    text: str
    final: bool
    data: dict[str, Any]


def parse_stream(payload: bytes, limit: int) -> StreamPiece:
    """`<base>/say/stream`: {"id", "text", "final"}; options apply from the first piece."""
    data = _json_object(decode_utf8(payload, limit))
    if data.get("id") is None:
        raise PayloadError("stream piece needs an 'id'")
    request_id = _request_id(data)
    final = data.get("final", False)
    if not isinstance(final, bool):
        raise PayloadError("field 'final' must be true or false", request_id)
    return StreamPiece(request_id, _text(data, request_id, required=False), final, data)


def stream_request(piece: StreamPiece) -> Request:
    request = Request(id=piece.id, source="stream")
    _options(piece.data, request)
    return request


def parse_stop(payload: bytes, limit: int) -> str | None:
    """`<base>/stop`: empty, plain id, or {"id": ...}; None stops everything."""
    text = decode_utf8(payload, limit).strip()
    if not text:
        return None
    if text.startswith("{"):
        data = _json_object(text)
        return _request_id(data) if data.get("id") is not None else None
    return text[:128]


def parse_hermes(payload: bytes, limit: int) -> Request:
    """`hermes/tts/say` (Rhasspy 2.5 / Snips): text, siteId, lang, id, sessionId, volume."""
    data = _json_object(decode_utf8(payload, limit))
    with _blame(data):
        request = Request(id=_request_id(data), source="hermes")
        request.site_id = _field(data, "siteId", str, "default")
        request.session_id = _field(data, "sessionId", str, None)
        request.text = _text(data, request.id)
        request.volume = _field(data, "volume", (int, float), 1.0)
        if not 0.0 <= request.volume <= 2.0:
            raise PayloadError(f"volume {request.volume} outside 0..2", request.id)
    return request


def hermes_context(payload: bytes) -> dict[str, Any]:
    """Best-effort siteId/sessionId of a rejected Hermes message, for hermes/error/tts."""
    try:
        data = json.loads(payload.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in ("siteId", "sessionId", "id") if isinstance(data.get(k), str)}
