"""Magpie TTS daemon: MQTT text topics → priority queue → engine → ALSA, under systemd."""
