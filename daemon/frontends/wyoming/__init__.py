"""Wyoming, Home Assistant's TTS protocol over TCP (server.py; its `info` event in
info.py), advertised by zeroconf (mdns.py)."""
