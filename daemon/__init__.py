"""Magpie TTS daemon: a frontend-neutral core (core/) and its frontends (frontends/),
voices, ALSA playback and systemd integration, built by service.py."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("magpie-tts")  # one version: the package's own (pyproject.toml)
except PackageNotFoundError:  # a source tree run without installing it
    VERSION = "0+unknown"
