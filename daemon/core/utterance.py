"""An utterance: the request as asked (frozen), its live state, and its one outcome."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from magpie_tts.engine import StopToken, TextStream

log = logging.getLogger(__name__)

PRIORITIES = {"alert": 0, "normal": 1, "low": 2}
TERMINAL = frozenset({"finished", "stopped", "error"})
_sequence = itertools.count()


def new_id(prefix: str) -> str:
    """An id the daemon makes for a request: random, so no client can guess another's."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def shown_id(request_id: str | None) -> str:
    """A request id as a log line may show it: a client chose it, so quoted (a newline
    cannot forge a line) and cut to 64 characters (nor can its length flood the log)."""
    if request_id is None:
        return "-"
    return repr(request_id[:64]) + ("…" if len(request_id) > 64 else "")


def frontend_of(source: str) -> str:
    """Which frontend an ask came from (its `source`): ids, rate budgets and metrics are
    kept per frontend."""
    if source in ("say", "stream", "hermes"):
        return "mqtt"
    return source.split("-", 1)[0]  # wyoming, wyoming-stream, http, http-say, local


@dataclass(frozen=True)
class Ask:
    """What a frontend was asked to speak; never changes after acceptance."""

    id: str
    text: str = ""
    source: str = "say"  # which frontend/topic asked: say | stream | hermes | local | ...
    voice: str | None = None
    speed: float = 1.0
    volume: float = 1.0
    speaker: int | str | None = None  # multi-speaker voices: id or name
    priority: str = "normal"
    cacheable: bool = False  # the sender marks this phrase as worth caching
    # Riva's format, entries separated by commas: "word  IPA,word  IPA" (over engine.lexicon)
    custom_dictionary: str | None = None
    marks: bool = False  # report `word` and `mark` events as each sounds (the speaker)
    site_id: str | None = None  # Hermes
    session_id: str | None = None  # Hermes
    received_at: float = field(default_factory=time.monotonic)

    @property
    def frontend(self) -> str:
        return frontend_of(self.source)

    @property
    def key(self) -> tuple[str, str]:
        """What names a live request: its id within its frontend's namespace, so a client
        of one frontend cannot squat (or stop) another frontend's ids."""
        return self.frontend, self.id


@dataclass(frozen=True)
class Event:
    name: str  # queued | started | interrupted | finished | stopped | error
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.name in TERMINAL


class Sink(Protocol):
    """Where a frontend hears about its utterances (called outside the core's lock)."""

    def report(self, utterance: Utterance, event: Event) -> None: ...


class AudioOut(Protocol):
    """Where a client-bound utterance's audio goes (a Wyoming or HTTP connection) instead
    of the speaker. `write` is called from a synthesis thread and may block while the
    client catches up; it returns False once the client is gone or too slow. One that
    has a `words(list[WordTime])` method is given each chunk's word timings before it."""

    def write(self, pcm: Any, sample_rate: int) -> bool: ...


class NullSink:
    def report(self, utterance: Utterance, event: Event) -> None:
        pass


@dataclass(eq=False)
class Utterance:
    """Live state of one accepted request; owned by the core."""

    ask: Ask
    sink: Sink = field(default_factory=NullSink)
    units: list[str] = field(default_factory=list)  # validated units (grows for streams)
    stream: TextStream | None = None
    audio_out: AudioOut | None = None  # None: the speaker
    cursor: int = 0  # first unit not yet fully heard: where a resume starts
    sequence: int = field(default_factory=lambda: next(_sequence))
    stop: StopToken = field(default_factory=StopToken)
    stop_reason: str | None = None  # an explicit stop: wins over a pending resume
    preempted: bool = False
    stream_timed_out: bool = False
    outcome: Event | None = None
    _report_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def id(self) -> str:
        return self.ask.id

    @property
    def rank(self) -> tuple[int, int]:
        return PRIORITIES[self.ask.priority], self.sequence

    def report(self, event: Event) -> bool:
        """Tell the sink; a terminal event only once. False if it was already concluded."""
        with self._report_lock:
            if self.outcome is not None:
                # names only: an event's fields may quote the request
                log.error(
                    "utterance %s already %s; dropping %s",
                    shown_id(self.id),
                    self.outcome.name,
                    event.name,
                )
                return False
            if event.terminal:
                self.outcome = event
            self.sink.report(self, event)
            return True

    def ordered(self) -> threading.RLock:
        """Hold while making a change whose event must precede the next one (queued)."""
        return self._report_lock

    def pending_units(self, idle_s: float, should_stop: Callable[[], bool]) -> Iterator[str]:
        """Units from the cursor on: those known, then the stream's as they complete."""
        index = self.cursor
        while index < len(self.units):
            yield self.units[index]
            index += 1
        if self.stream is None:
            return
        for unit in self.stream.units(idle_s, should_stop):
            self.units.append(unit)
            yield unit
        if not self.stream.closed and not should_stop():
            # idle without final: speak what is left, and say so at the end
            self.stream_timed_out = True
            self.stream.finish()
            for unit in self.stream.units(0):
                self.units.append(unit)
                yield unit


class Refused(Exception):
    """A request the core will not take; str() is the reason the sender hears."""

    def __init__(
        self,
        reason: str,
        request_id: str | None = None,
        retry_after: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.request_id = request_id
        self.retry_after = retry_after  # a rate limit's wait in seconds; None: unknown
        self._code = code

    @property
    def code(self) -> str:
        """A machine-readable kind for the reason (Wyoming error codes, HTTP statuses,
        metrics). A refusal whose reason quotes what a client chose (an id) names its code
        where it is raised: read from the words, a client's id could pick the code."""
        if self._code is not None:
            return self._code
        reason = str(self)
        for words, code in _REFUSAL_CODES:
            if any(word in reason for word in words):
                return code
        return "refused"


_REFUSAL_CODES = (
    (("unknown voice", "speaker"), "unknown-voice"),
    (("too long",), "too-long"),
    (("too many", "rate limit", "queue full"), "busy"),
    (("empty", "speakable"), "empty-text"),
    (("markup", "control character"), "bad-text"),
    (("SSML",), "bad-ssml"),
    (("custom_dictionary", "lexicon"), "bad-dictionary"),
    (("shutting down",), "shutting-down"),
    (("in use", "already queued"), "duplicate-id"),
)
