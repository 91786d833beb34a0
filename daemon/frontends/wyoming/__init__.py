"""Wyoming, Home Assistant's TTS protocol over TCP (server.py), advertised by zeroconf
(mdns.py)."""
