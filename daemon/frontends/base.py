"""The frontend contract: how every way into the daemon is built, started and stopped.

A frontend only translates. Its protocol's messages become asks for the core
(`Core.submit`, `feed_stream`, `stop`; refusals counted with `Core.refused`), and the
core's events for them come back through the `Sink` (and, for client-bound audio, the
`AudioOut`) it passes along. Like mopidy's frontends, each is one class built the same
way, `Frontend(config, host)`, by `Service`, which builds every enabled one, starts them
and stops them in reverse order.

A frontend that `answers_while_loading` (HTTP, so `/health` can say "loading" to a
supervisor) is started before the voice loads and must check `host.ready` before it
uses the core; the others are started once the voice is loaded and the core runs, and
may use the core from their start on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from magpie_tts.engine import VoiceSummary

    from ..config import Config
    from ..core.core import Core
    from ..core.utterance import Event, Utterance


class Host(Protocol):
    """The daemon as a frontend sees it (`Service` is one; tests pass fakes)."""

    core: Core
    version: str

    @property
    def ready(self) -> bool:
        """Voices loaded and the core serving."""
        ...

    @property
    def healthy(self) -> bool:
        """The speaker worker and the player are alive (what the systemd watchdog hears)."""
        ...

    def status(self) -> dict[str, Any]: ...

    def catalogue(self) -> list[VoiceSummary]:
        """Every voice a request can name."""
        ...

    def metrics_text(self) -> bytes:
        """The Prometheus exposition of the daemon's metrics."""
        ...


class Frontend:
    """A way into the daemon. Subclasses set `name` and implement `start` and `stop`;
    the other hooks are optional."""

    name: ClassVar[str]
    answers_while_loading: ClassVar[bool] = False

    def __init__(self, config: Config, host: Host) -> None:
        self.config = config
        self.host = host

    @classmethod
    def enabled(cls, config: Config) -> bool:
        """Whether the configuration asks for this frontend."""
        return True

    def start(self) -> None:
        """Listen or connect; raise (OSError, ConnectError) if it cannot, before READY."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def observe(self, utterance: Utterance, event: Event) -> None:
        """Every utterance's events, whoever asked for it (status that follows the queue)."""

    def audio_changed(self, problem: str | None) -> None:
        """The speaker's audio device failed (`problem`) or recovered (None)."""

    def health_changed(self) -> None:
        """The daemon went onto its fallback voice or back (status shows it)."""

    def status(self) -> dict[str, Any]:
        """This frontend's part of the daemon's status."""
        return {}
