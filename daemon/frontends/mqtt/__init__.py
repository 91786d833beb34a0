"""MQTT and Rhasspy Hermes: payloads to asks and events to topics (frontend.py), the
paho connection (link.py), payload parsing (payloads.py), Home Assistant discovery."""
